#include "base/file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe {
namespace {

using ::testing::HasSubstr;

TEST(ReadFileToStringTest, ReadsTheWholeFile) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/f.bin";
  // Longer than one read, with a NUL byte.
  const std::string bytes = std::string(100000, 'x') + std::string(1, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, bytes);
}

TEST(ReadFileToStringTest, RefusesFilesOverTheLimit) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/big";
  std::ofstream(path) << "12345";
  EXPECT_TRUE(ReadFileToString(path, 5).ok());
  const absl::Status status = ReadFileToString(path, 4).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(path + ": larger than 4 bytes"));
}

TEST(ReadFileToStringTest, MissingFileIsNotFound) {
  const absl::Status status = ReadFileToString("/nonexistent/file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("/nonexistent/file: cannot open"));
}

}  // namespace
}  // namespace ringmoe
