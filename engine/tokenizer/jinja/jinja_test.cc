#include "engine/tokenizer/jinja/jinja.h"

#include "gtest/gtest.h"

namespace ringmoe::jinja {
namespace {

TEST(JinjaTest, Smoke) {
  auto t = Template::Parse("Hello {{ name }}!");
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = t->Render({{"name", Value::String("world")}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "Hello world!");
}

}  // namespace
}  // namespace ringmoe::jinja
