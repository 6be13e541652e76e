#include "engine/tokenizer/chat_template.h"

#include <pthread.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/test_data.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// JSON Lines as ordered_json: key order and number kinds as written.
std::vector<OrderedJson> ReadCases(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  std::vector<OrderedJson> cases;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty()) cases.push_back(OrderedJson::parse(line));
  }
  return cases;
}

ChatTemplateInput InputOf(const OrderedJson& c) {
  ChatTemplateInput input;
  input.messages = c["messages"];
  if (c.contains("tools")) input.tools = c["tools"];
  input.add_generation_prompt = c.value("add_generation_prompt", false);
  if (c.contains("template_kwargs"))
    input.template_kwargs = c["template_kwargs"];
  if (c.contains("now")) {
    absl::CivilSecond now;
    EXPECT_TRUE(absl::ParseCivilTime(c["now"].get<std::string>(), &now));
    input.now = now;
  }
  return input;
}

// Renders every case of `path` with the template each names, and checks
// the prompt (or the raised error) and its ids.
int CheckCases(const std::string& family, const std::string& path) {
  const std::string dir = testdata::GoldenDir(family);
  const Tokenizer* tokenizer = testdata::GetTokenizer(family);
  int checked = 0;
  for (const OrderedJson& c : ReadCases(path)) {
    const std::string name = c.value("case_id", std::string("chat.jsonl"));
    SCOPED_TRACE(absl::StrCat(family, " ", name, " ", c.value("category", "")));
    const std::string file = c.value("template", "tokenizer_config.json");
    absl::StatusOr<ChatTemplate> chat_template =
        file == "tokenizer_config.json"
            ? ChatTemplate::Load(dir)
            : ChatTemplate::Load(dir, dir + "/" + file);
    EXPECT_TRUE(chat_template.ok()) << chat_template.status();
    if (!chat_template.ok()) continue;
    absl::StatusOr<std::string> prompt = chat_template->Render(InputOf(c));
    ++checked;
    if (c.contains("error")) {
      EXPECT_FALSE(prompt.ok());
      EXPECT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(prompt.status().message(), c["error"].get<std::string>());
      continue;
    }
    EXPECT_TRUE(prompt.ok()) << prompt.status();
    if (!prompt.ok()) continue;
    EXPECT_EQ(*prompt, c["prompt"].get<std::string>());
    // gpt_oss's tokenizer.json may be absent (too large for the repository):
    // then only the prompt is checked.
    if (tokenizer != nullptr) {
      EXPECT_EQ(tokenizer->Encode(*prompt, /*add_special_tokens=*/false),
                c["ids"].get<std::vector<int32_t>>());
    }
  }
  return checked;
}

TEST(ChatTemplateTest, PublicTemplateCases) {
  int total = 0;
  for (const std::string& family : testdata::AllNames()) {
    total += CheckCases(family,
                        testdata::GoldenDir(family) + "/chat_templates.jsonl");
  }
  EXPECT_EQ(total, 250);
  if (testdata::GetTokenizer("gpt_oss") == nullptr) {
    std::fprintf(stderr, "gpt_oss tokenizer.json absent: its ids unchecked\n");
  }
}

TEST(ChatTemplateTest, ChatJsonl) {
  int total = 0;
  for (const char* family : {"qwen3", "deepseek_v3"}) {
    total += CheckCases(family, testdata::GoldenDir(family) + "/chat.jsonl");
  }
  EXPECT_EQ(total, 20);
}

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                               : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::string Render(const ChatTemplate& t) {
    ChatTemplateInput input;
    input.messages =
        OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
    absl::StatusOr<std::string> out = t.Render(input);
    return out.ok() ? *out : std::string(out.status().message());
  }
  fs::path dir_;
};

TEST_F(LoadTest, Precedence) {
  Write("tokenizer_config.json",
        R"({"chat_template": "config {{ bos_token }}",
            "bos_token": {"__type": "AddedToken", "content": "<s>"},
            "eos_token": "</s>", "unk_token": null, "pad_token": null,
            "additional_special_tokens": ["<a>", {"content": "<b>"}]})");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "config <s>");
  EXPECT_EQ(
      t->special_tokens().dump(),
      R"({"bos_token":"<s>","eos_token":"</s>","additional_special_tokens":["<a>","<b>"]})");

  // chat_template.jinja beside the tokenizer wins over the config's.
  Write("chat_template.jinja",
        "jinja {{ eos_token }} {{ additional_special_tokens|join }} "
        "{{ unk_token is defined }}\n");
  t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "jinja </s> <a><b> False");

  // An explicit file wins over both.
  Write("other.jinja", "file {{ messages[0].content }}");
  t = ChatTemplate::Load(dir_, (dir_ / "other.jinja").string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "file hi");

  EXPECT_EQ(ChatTemplate::Load(dir_, (dir_ / "missing.jinja").string())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LoadTest, ListFormTemplates) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                              {"name": "default", "template": "default"}]})");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "default");

  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "tools"}]})");
  t = ChatTemplate::Load(dir_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "tool_use"));
}

TEST_F(LoadTest, MissingTemplateIsNotFound) {
  Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Load(dir_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(t.status().message(), dir_.string()));
  EXPECT_EQ(ChatTemplate::Load((dir_ / "nothing").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LoadTest, ParseErrorsNameTheLine) {
  Write("chat_template.jinja", "ok\n{{ x | nosuchfilter }}");
  EXPECT_EQ(ChatTemplate::Load(dir_).status().message(),
            "chat template line 2: unknown filter 'nosuchfilter'");
}

TEST(ChatTemplateTest, Variables) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromSource(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} "
      "{{ bos_token }} {{ flag }} {{ raise_exception is defined }}",
      OrderedJson{{"bos_token", "<s>"}});
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInput input;
  input.add_generation_prompt = true;
  input.template_kwargs = OrderedJson{{"flag", 1.0}, {"bos_token", "[B]"}};
  EXPECT_EQ(*t->Render(input), "True True True [B] 1.0 True");
  input.template_kwargs = OrderedJson::array();
  EXPECT_EQ(t->Render(input).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, Errors) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromSource(
      "{% if messages|length > 1 %}{{ raise_exception('Only one message, "
      "please') }}{% endif %}\n{{ messages[0].content + 1 }}");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInput input;
  input.messages =
      OrderedJson::parse(R"([{"content": "a"}, {"content": "b"}])");
  absl::Status status = t->Render(input).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "Only one message, please");

  input.messages = OrderedJson::parse(R"([{"content": "a"}])");
  status = t->Render(input).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      status.message(),
      "chat template line 2: can only concatenate str (not \"int\") to str");
}

TEST(ChatTemplateTest, SandboxLimits) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromSource(
      "{% for m in messages %}{% for i in range(1000) %}{{ m.content }}"
      "{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInput input;
  input.messages = OrderedJson::array();
  for (int i = 0; i < 100; ++i) {
    input.messages.push_back({{"content", std::string(100, 'x')}});
  }
  input.limits.max_output_bytes = 1 << 20;
  absl::Status status = t->Render(input).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "chat template line 1: the output exceeded max_output_bytes "
            "(1048576 bytes)");
  input.limits.max_output_bytes = 100 << 20;
  input.limits.max_steps = 10000;
  status = t->Render(input).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "max_steps")) << status;

  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "[";
  for (int i = 0; i < 1000; ++i) deep += "]";
  input = ChatTemplateInput();
  input.messages = OrderedJson::parse(deep);
  status = t->Render(input).status();
  EXPECT_EQ(status.message(),
            "chat template: messages: JSON nested more than 256 levels deep");
}

TEST(ChatTemplateTest, StrftimeNow) {
  const absl::CivilSecond time(2025, 8, 5, 9, 30, 7);
  EXPECT_EQ(PythonStrftime("%Y-%m-%d %H:%M:%S", time), "2025-08-05 09:30:07");
  EXPECT_EQ(PythonStrftime("%A %a %B %b %j %p %I %y %%", time),
            "Tuesday Tue August Aug 217 AM 09 25 %");
  EXPECT_EQ(PythonStrftime("%d %B %Y%z%Z|%f", time, 42),
            "05 August 2025|000042");
  EXPECT_EQ(PythonStrftime("", time), "");

  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromSource("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.ok());
  ChatTemplateInput input;
  absl::StatusOr<std::string> year = t->Render(input);
  ASSERT_TRUE(year.ok()) << year.status();
  EXPECT_EQ(year->size(), 4);
  input.now = time;
  EXPECT_EQ(*t->Render(input), "2025");
}

TEST(ChatTemplateTest, RendersFromManyThreads) {
  const std::string dir = testdata::GoldenDir("qwen3");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<OrderedJson> cases =
      ReadCases(dir + "/chat_templates.jsonl");
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&, thread] {
      for (int round = 0; round < 5; ++round) {
        for (const OrderedJson& c : cases) {
          if (c["template"] != "tokenizer_config.json") continue;
          absl::StatusOr<std::string> prompt = t->Render(InputOf(c));
          if (!prompt.ok() || *prompt != c["prompt"].get<std::string>()) {
            ++failures[thread];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

// A request's tool schemas nest as deep as the client likes, and gpt-oss's
// template recurses through them: rendered from a thread whose stack is
// small (civetweb's HTTP workers have 100 KB; this one 64 KB), it must
// neither crash nor fail. Without its own stack the render overflowed this
// one, and a 9-level schema sent over HTTP crashed the server.
struct SmallStackRender {
  const ChatTemplate* chat_template;
  ChatTemplateInput input;
  absl::StatusOr<std::string> prompt;
};

void* RenderOnSmallStack(void* arg) {
  auto* job = static_cast<SmallStackRender*>(arg);
  job->prompt = job->chat_template->Render(job->input);
  return nullptr;
}

TEST(ChatTemplateTest, DeepToolSchemasFromASmallStack) {
  const std::string dir = testdata::GoldenDir("gpt_oss");
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Load(dir, dir + "/chat_template.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  OrderedJson schema = {{"type", "string"}};
  for (int i = 0; i < 30; ++i) {
    schema = {{"type", "object"}, {"properties", {{"a", schema}}}};
  }
  SmallStackRender job{&*t, {}, absl::UnknownError("not run")};
  job.input.messages =
      OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  job.input.tools = OrderedJson::array(
      {{{"type", "function"},
        {"function",
         {{"name", "f"}, {"description", "d"}, {"parameters", schema}}}}});
  job.input.add_generation_prompt = true;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 64 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, &RenderOnSmallStack, &job), 0);
  pthread_attr_destroy(&attr);
  pthread_join(thread, nullptr);
  ASSERT_TRUE(job.prompt.ok()) << job.prompt.status();
  EXPECT_NE(job.prompt->find("type f = (_: {"), std::string::npos);
}

}  // namespace
}  // namespace ringmoe::tokenizer
