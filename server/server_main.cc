// ringmoe_server --model DIR: serves one model over gRPC (ringmoe.v1,
// KServe v2, health, reflection) with Prometheus metrics on a second port.
//
// Lifecycle: load the model, start the engine thread and both listeners,
// then wait for SIGTERM or SIGINT. On the signal: health turns NOT_SERVING,
// new requests are refused (UNAVAILABLE), accepted ones finish (up to
// --shutdown_grace_period_s, or until a second signal), the listeners close
// and the process exits 0.
//
// With --expert_parallel under mpirun -np N (flags shared with the CLI:
// engine/runtime/expert_parallel_job.h), every rank loads the model
// holding its share of the routed experts; attention is replicated, or with
// --expert_parallel_attention=data_parallel each sequence and its KV cache
// live on one rank (the scheduler plans every rank's cache). Rank 0
// serves as above, its scheduler's steps broadcast to the other ranks
// (engine/serving/step_broadcast.h); the other ranks open no port, write no
// ready file and log only errors: they replay rank 0's steps until rank 0,
// having drained on SIGTERM, tells them to stop, and then exit 0. A failed
// collective or engine step on any rank ends the whole job (every rank
// exits non-zero; requests in flight on rank 0 fail with the process).
// Rank 0 gathers every rank's exchange counters for its /metrics (label
// `rank`), and on stop writes --expert_placement_file when given.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/parallel/communicator.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_flags.h"
#include "engine/runtime/expert_parallel_job.h"
#include "engine/serving/chat_output.h"
#include "engine/serving/request_api.h"
#include "engine/serving/scheduler.h"
#include "engine/serving/step_broadcast.h"
#include "engine/serving/step_runner.h"
#include "engine/tokenizer/chat_template.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/civetweb_stop.h"
#include "server/generation_service.h"
#include "server/http_server.h"
#include "server/kserve_service.h"
#include "server/metrics.h"
#include "server/open_calls.h"
#include "server/openai_service.h"
#include "server/ring_metrics.h"
#include "server/service_util.h"
#include "server/stream_buffers.h"
#include "server/unparsable_request_interceptor.h"

ABSL_FLAG(std::string, model_name, "",
          "Name clients use for the model; default: the --model directory's "
          "base name.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address both listeners bind to.");
ABSL_FLAG(int, grpc_port, 8001,
          "gRPC port (0 = any free port, see --ready_file).");
ABSL_FLAG(int, http_port, 8000,
          "OpenAI-compatible HTTP port (0 = any free port, see --ready_file; "
          "-1 = no HTTP API).");
ABSL_FLAG(int, http_threads, 64,
          "HTTP requests served at once (streams included); more wait.");
ABSL_FLAG(int64_t, http_max_body_bytes, 8 << 20,
          "Larger HTTP request bodies are refused with 413.");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file used instead of the model's own "
          "(tokenizer_config.json's chat_template or chat_template.jinja).");
ABSL_FLAG(int, metrics_port, 8002,
          "Prometheus /metrics port (0 = any free port, see --ready_file).");
ABSL_FLAG(
    std::string, ready_file, "",
    "When set, written once the server is ready: one JSON object with the "
    "bound grpc_port, metrics_port and http_port (for tests and scripts).");
ABSL_FLAG(
    int, max_queue, 256,
    "Requests waiting to start; more are refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_running_sequences, 64,
          "Sequences in the running batch at once.");
ABSL_FLAG(int, max_batch_tokens, 512,
          "Tokens per engine step (decode tokens plus prompt chunks); longer "
          "prompts are prefilled in chunks.");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "Longest prompt accepted; 0 = the model's context.");
ABSL_FLAG(int, max_new_tokens, 0,
          "Largest max_tokens accepted; 0 = the model's context.");
ABSL_FLAG(int, default_max_tokens, 256,
          "max_tokens for requests that do not set it.");
ABSL_FLAG(bool, expert_metrics, false,
          "Export ringmoe_expert_tokens_total{layer, expert}: one series per "
          "expert of every layer (high cardinality).");
ABSL_FLAG(int64_t, max_stream_buffer_bytes, int64_t{64} << 20,
          "Reply bytes that may wait for a stream's client to read (gRPC "
          "streams and HTTP event streams); past it the stream ends with "
          "RESOURCE_EXHAUSTED. All streams together may hold 16 times as "
          "much.");
ABSL_FLAG(int, unhealthy_after_failed_steps, 3,
          "Health turns NOT_SERVING after this many engine steps in a row "
          "failed, and SERVING again at the next one that succeeds.");
ABSL_FLAG(double, shutdown_grace_period_s, 30,
          "On SIGTERM/SIGINT, how long in-flight requests may take to finish "
          "before they are cancelled.");

namespace ringmoe::server {

using serving::Scheduler;
using serving::SchedulerOptions;
using serving::ServedModel;
namespace {

constexpr char kServerVersion[] = "0.1.0";
constexpr const char* kServices[] = {"", "ringmoe.v1.Generation",
                                     "inference.GRPCInferenceService"};

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The expert-parallel job this process is a rank of; null without
// --expert_parallel.
parallel::Communicator* job = nullptr;

bool HasPeers() { return job != nullptr && job->size() > 1; }

// This rank's expert-parallel counters, read from `engine`.
serving::RankStatsSource RankStatsOf(const runtime::Engine& engine) {
  return [&engine] {
    serving::RankStats stats;
    if (const auto ep = engine.expert_parallel_stats()) {
      stats.bytes_sent = ep->traffic.bytes_sent;
      stats.bytes_received = ep->traffic.bytes_received;
      stats.collectives = ep->traffic.collectives;
      stats.collective_seconds = ep->traffic.seconds;
      stats.experts_held = static_cast<uint64_t>(ep->experts_held);
      stats.replica_rows = ep->replica_rows;
    }
    stats.ring_bytes_moved = engine.ring_stats().bytes_moved.load();
    stats.ring_stall_seconds = engine.ring_stats().stall_seconds();
    return stats;
  };
}

// Reports `status` and returns the exit status; with other ranks it ends
// the whole job instead (they may be waiting for this one in a collective).
int Fail(const absl::Status& status) {
  if (HasPeers()) {
    job->Abort(absl::Status(
        status.code(), absl::StrCat("ringmoe_server rank ", job->rank(), ": ",
                                    status.message())));
  }
  std::fprintf(stderr, "ringmoe_server: %s\n", status.ToString().c_str());
  return 1;
}

// The expert-parallel job failed (a rank stopped answering, a collective or
// a step failed): health turns NOT_SERVING, new requests are refused, the
// requests in flight get the failure (their steps fail with it) within a
// few seconds, and the whole job ends non-zero.
int FailJob(const absl::Status& failure, Scheduler& scheduler,
            grpc::Server& server, grpc::HealthCheckServiceInterface& health) {
  std::fprintf(stderr,
               "ringmoe_server: NOT_SERVING: %s; failing %lld requests\n",
               std::string(failure.message()).c_str(),
               static_cast<long long>(scheduler.num_active()));
  for (const char* service : kServices) health.SetServingStatus(service, false);
  scheduler.StopAccepting();
  scheduler.WaitUntilIdle(absl::Seconds(3));
  server.Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return Fail(failure);
}

// Waits up to `timeout` for SIGTERM or SIGINT (blocked in every thread, so
// they queue for sigtimedwait); returns the signal or 0.
int WaitForSignal(const sigset_t& signals, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  const int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// Protobuf logs an error for every message it fails to parse because a
// string is not UTF-8: requests a client controls, already refused and
// counted (unparsable_request_interceptor.h), so logging each would let one
// client fill the log. Its other messages pass on.
void ProtobufLog(google::protobuf::LogLevel level, const char* filename,
                 int line, const std::string& message) {
  if (absl::StrContains(message, "invalid UTF-8 data when parsing")) return;
  static const char* const kLevels[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  std::fprintf(stderr, "ringmoe_server: protobuf %s %s:%d: %s\n",
               kLevels[std::clamp(static_cast<int>(level), 0, 3)], filename,
               line, message.c_str());
}

int Serve() {
  google::protobuf::SetLogHandler(&ProtobufLog);
  // Block the shutdown signals before any thread starts so that every
  // thread inherits the mask and only sigtimedwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  struct PortFlag {
    const char* name;
    int value;
    int lowest;  // -1: the listener may be turned off
  };
  for (const PortFlag& port :
       {PortFlag{"grpc_port", absl::GetFlag(FLAGS_grpc_port), 0},
        PortFlag{"metrics_port", absl::GetFlag(FLAGS_metrics_port), 0},
        PortFlag{"http_port", absl::GetFlag(FLAGS_http_port), -1}}) {
    if (port.value < port.lowest || port.value > 65535) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--", port.name, " must lie in [", port.lowest,
                       ", 65535], got ", port.value)));
    }
  }
  if (absl::GetFlag(FLAGS_http_threads) < 1 ||
      absl::GetFlag(FLAGS_http_threads) > 4096) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--http_threads must lie in [1, 4096], got ",
                     absl::GetFlag(FLAGS_http_threads))));
  }
  if (absl::GetFlag(FLAGS_max_stream_buffer_bytes) < (1 << 20) ||
      absl::GetFlag(FLAGS_max_stream_buffer_bytes) > (int64_t{1} << 36)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--max_stream_buffer_bytes must lie in [1 MiB, 64 GiB], got ",
        absl::GetFlag(FLAGS_max_stream_buffer_bytes))));
  }
  if (absl::GetFlag(FLAGS_http_max_body_bytes) < 1024) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--http_max_body_bytes must be at least 1024, got ",
                     absl::GetFlag(FLAGS_http_max_body_bytes))));
  }
  absl::StatusOr<runtime::EngineOptions> options =
      runtime::EngineOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  options->count_expert_tokens = absl::GetFlag(FLAGS_expert_metrics);
  SchedulerOptions sched;
  sched.max_queue = absl::GetFlag(FLAGS_max_queue);
  sched.max_running_sequences = absl::GetFlag(FLAGS_max_running_sequences);
  sched.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  sched.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  sched.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  sched.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  sched.unhealthy_after_failed_steps =
      absl::GetFlag(FLAGS_unhealthy_after_failed_steps);
  // A server that refuses everything it is sent reports healthy: a queue
  // of 0 is no setting.
  if (sched.max_queue < 1 || sched.max_running_sequences < 1 ||
      sched.max_batch_tokens < 1 || sched.max_prompt_tokens < 0 ||
      sched.max_new_tokens < 0 || sched.default_max_tokens < 1 ||
      sched.unhealthy_after_failed_steps < 1) {
    return Fail(absl::InvalidArgumentError(
        "--max_queue, --max_running_sequences, --max_batch_tokens, "
        "--default_max_tokens and --unhealthy_after_failed_steps must be >= "
        "1; --max_prompt_tokens and --max_new_tokens >= 0"));
  }
  const double grace_s = absl::GetFlag(FLAGS_shutdown_grace_period_s);
  if (!(grace_s >= 0 && grace_s <= 86400)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--shutdown_grace_period_s must lie in [0, 86400], got ", grace_s)));
  }
  const absl::Duration grace = absl::Seconds(grace_s);
  if (sched.max_batch_tokens < sched.max_running_sequences) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--max_batch_tokens (", sched.max_batch_tokens,
        ") must be at least --max_running_sequences (",
        sched.max_running_sequences,
        "): every running sequence needs its decode token in each step")));
  }

  absl::StatusOr<runtime::ExpertParallelJob> joined =
      runtime::ExpertParallelJob::Join(&*options);
  if (!joined.ok()) return Fail(joined.status());
  runtime::ExpertParallelJob& expert_parallel = *joined;
  job = expert_parallel.communicator();

  const absl::Time load_start = absl::Now();
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::Load(*options);
  if (!engine.ok()) return Fail(engine.status());
  if (HasPeers() && job->rank() != 0) {
    // A follower: no front end; rank 0's steps until it says stop.
    serving::EngineStepRunner runner(engine->get());
    const absl::Status followed =
        serving::RunStepFollower(*job, runner, RankStatsOf(**engine));
    if (!followed.ok()) return Fail(followed);
    if (absl::Status s = expert_parallel.Finish(**engine); !s.ok()) {
      return Fail(s);
    }
    return 0;
  }
  if (HasPeers()) {
    std::fprintf(stderr,
                 "ringmoe_server: expert parallel over %d ranks, this is "
                 "rank 0\n",
                 job->size());
  }
  std::string name = absl::GetFlag(FLAGS_model_name);
  if (name.empty()) name = BaseName(options->model_dir);
  std::fprintf(stderr, "ringmoe_server: %s\n",
               (*engine)->placement().Summary().c_str());
  std::fprintf(stderr, "ringmoe_server: loaded %s (%s) from %s in %.2f s\n",
               name.c_str(), (*engine)->spec().architecture.c_str(),
               options->model_dir.c_str(),
               absl::ToDoubleSeconds(absl::Now() - load_start));

  auto registry = std::make_shared<prometheus::Registry>();
  Metrics metrics(registry);
  const std::string host = absl::GetFlag(FLAGS_host);
  // Every rank's counters, gathered by the step broadcast (declared before
  // the exposer that reads them).
  serving::RankStatsBoard rank_stats;
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Connections that send nothing (or stop reading) must not hold the
    // scrape threads: each is dropped after a few seconds, and there are
    // threads to spare for the scrapers meanwhile.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports",
        absl::StrCat(host, ":", absl::GetFlag(FLAGS_metrics_port)),
        "num_threads", "16", "request_timeout_ms", "3000",
        "keep_alive_timeout_ms", "3000", "enable_keep_alive", "yes"});
  } catch (const std::exception& e) {
    return Fail(absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", host, ":",
                     absl::GetFlag(FLAGS_metrics_port), ": ", e.what())));
  }
  exposer->RegisterCollectable(registry);
  auto ring_metrics = std::make_shared<RingMetrics>((*engine)->ring_stats());
  exposer->RegisterCollectable(ring_metrics);
  auto stream_metrics = std::make_shared<StreamBufferMetrics>();
  exposer->RegisterCollectable(stream_metrics);
  auto rank_metrics = std::make_shared<ExpertParallelMetrics>(rank_stats);
  if (HasPeers()) exposer->RegisterCollectable(rank_metrics);
  StreamBuffers::SetLimits(absl::GetFlag(FLAGS_max_stream_buffer_bytes),
                           16 * absl::GetFlag(FLAGS_max_stream_buffer_bytes));
  std::shared_ptr<ExpertTokenMetrics> expert_metrics;
  if ((*engine)->expert_usage() != nullptr) {
    expert_metrics =
        std::make_shared<ExpertTokenMetrics>(*(*engine)->expert_usage());
    exposer->RegisterCollectable(expert_metrics);
  }

  // The chat template: the flag's file, else the model's own, else none
  // (chat requests are then refused with a message saying so).
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  {
    const std::string file = absl::GetFlag(FLAGS_chat_template);
    absl::StatusOr<tokenizer::ChatTemplate> loaded =
        tokenizer::ChatTemplate::Load(options->model_dir, file);
    if (loaded.ok()) {
      chat_template =
          std::make_unique<tokenizer::ChatTemplate>(*std::move(loaded));
    } else if (!file.empty() || !absl::IsNotFound(loaded.status())) {
      return Fail(loaded.status());
    }
  }
  const serving::ChatFormat chat_format =
      chat_template ? serving::DetectChatFormat(chat_template->source())
                    : serving::ChatFormat::kPlain;
  std::fprintf(stderr, "ringmoe_server: chat template: %s\n",
               chat_template
                   ? absl::StrCat("yes (output format ",
                                  serving::ChatFormatName(chat_format), ")")
                         .c_str()
                   : "none");

  serving::EngineStepRunner engine_runner(engine->get());
  // With other ranks, every step goes to them before it runs here.
  std::unique_ptr<serving::BroadcastingStepRunner> broadcaster;
  if (HasPeers()) {
    broadcaster = std::make_unique<serving::BroadcastingStepRunner>(
        &engine_runner, job, RankStatsOf(**engine), &rank_stats);
  }
  Scheduler scheduler(broadcaster != nullptr
                          ? static_cast<serving::StepRunner*>(broadcaster.get())
                          : &engine_runner,
                      sched, &metrics);
  ServedModel model{name,     engine->get(),       &scheduler,
                    &metrics, chat_template.get(), chat_format};
  GenerationService generation(model);
  KServeService kserve(model, kServerVersion);
  OpenAiService openai(model, absl::ToUnixSeconds(absl::Now()));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(UnparsableRequestInterceptorFactory(&metrics));
  OpenCalls open_calls;
  interceptors.push_back(open_calls.InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  int grpc_port = 0;
  const std::string address =
      absl::StrCat(host, ":", absl::GetFlag(FLAGS_grpc_port));
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &grpc_port);
  builder.RegisterService(&generation);
  builder.RegisterService(&kserve);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    return Fail(
        absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", address)));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  for (const char* service : kServices) health->SetServingStatus(service, true);

  std::unique_ptr<HttpServer> http;
  int http_port = -1;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    HttpServerOptions http_options;
    http_options.host = host;
    http_options.port = absl::GetFlag(FLAGS_http_port);
    http_options.num_threads = absl::GetFlag(FLAGS_http_threads);
    http_options.max_body_bytes =
        static_cast<size_t>(absl::GetFlag(FLAGS_http_max_body_bytes));
    // A write that makes no progress for longer than the grace period would
    // outlive a shutdown too.
    http_options.io_timeout_ms =
        static_cast<int>(std::clamp(grace_s * 1e3, 1000.0, 30000.0));
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
        http_options,
        [&openai](const HttpRequest& request, HttpResponse& response) {
          openai.Handle(request, response);
        });
    if (!started.ok()) return Fail(started.status());
    http = *std::move(started);
    http_port = http->port();
  }

  const int metrics_port = exposer->GetListeningPorts().at(0);
  std::fprintf(stderr,
               "ringmoe_server: serving '%s' on %s:%d (gRPC), "
               "http://%s:%d/v1 (OpenAI API), metrics at "
               "http://%s:%d/metrics\n",
               name.c_str(), host.c_str(), grpc_port, host.c_str(), http_port,
               host.c_str(), metrics_port);
  const std::string ready_file = absl::GetFlag(FLAGS_ready_file);
  if (!ready_file.empty()) {
    // Written under a temporary name and renamed, so a reader never sees
    // half a file.
    const std::string tmp = ready_file + ".tmp";
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << grpc_port
        << ", \"metrics_port\": " << metrics_port
        << ", \"http_port\": " << http_port << "}\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), ready_file.c_str()) != 0) {
      // Whoever waits for the file would wait forever: stop instead.
      std::remove(tmp.c_str());
      return Fail(absl::UnavailableError(
          absl::StrCat("cannot write the ready file ", ready_file, ": ",
                       std::strerror(errno))));
    }
  }

  // Health follows the engine: NOT_SERVING while its steps keep failing
  // (the probes take the instance out), SERVING again once they succeed.
  bool serving = true;
  int sig = 0;
  while (sig == 0) {
    sig = WaitForSignal(signals, absl::Milliseconds(250));
    if (broadcaster != nullptr && !broadcaster->failure().ok()) {
      return FailJob(broadcaster->failure(), scheduler, *server, *health);
    }
    if (sig != 0 || scheduler.healthy() == serving) continue;
    serving = !serving;
    std::fprintf(stderr, "ringmoe_server: health %s\n",
                 serving ? "SERVING again: engine steps succeed"
                         : "NOT_SERVING: engine steps keep failing");
    for (const char* service : kServices) {
      health->SetServingStatus(service, serving);
    }
  }
  const absl::Time signalled = absl::Now();
  std::fprintf(stderr, "ringmoe_server: signal %d: draining %lld requests\n",
               sig, static_cast<long long>(scheduler.num_active()));
  for (const char* service : kServices)
    health->SetServingStatus(service, false);
  scheduler.StopAccepting();
  const absl::Time give_up = absl::Now() + grace;
  // Drained: every request finished, and every call that carried one has
  // delivered its answer (the listener, and health, stay up until then);
  // or the grace period passed, or a second signal came.
  while (!scheduler.WaitUntilIdle(absl::Milliseconds(50)) ||
         !open_calls.WaitUntilNone(absl::Milliseconds(50))) {
    if (absl::Now() >= give_up ||
        WaitForSignal(signals, absl::ZeroDuration()) != 0) {
      std::fprintf(stderr,
                   "ringmoe_server: cancelling %lld unfinished requests (%lld "
                   "calls open)\n",
                   static_cast<long long>(scheduler.num_active()),
                   static_cast<long long>(open_calls.count()));
      scheduler.CancelAll();
      // Cancelled sequences end at the scheduler's next step.
      scheduler.WaitUntilIdle(absl::Seconds(1));
      break;
    }
  }
  // Nothing of ours is left, or what is left is being cut short. gRPC's
  // Shutdown would wait until its deadline for the rest, health watches and
  // every idle connection (a client's pool, a load balancer's), so its
  // deadline is now.
  server->Shutdown(absl::ToChronoTime(absl::Now()));
  server->Wait();
  const absl::Time drained = absl::Now();
  http.reset();
  // Scrapes during the drain were answered; none is needed now.
  StopCivetwebPromptly(host, exposer->GetListeningPorts(),
                       [&exposer] { exposer.reset(); });
  // Drained: the other ranks may go (a step the scheduler still tried
  // would fail here, not reach them).
  if (broadcaster != nullptr) broadcaster->Stop();
  if (absl::Status s = expert_parallel.Finish(**engine); !s.ok()) {
    return Fail(s);
  }
  if (!ready_file.empty()) std::remove(ready_file.c_str());
  // The phases' times tell a slow shutdown's cause apart: streams that
  // kept writing, or the listeners.
  std::fprintf(stderr,
               "ringmoe_server: stopped %.2f s after the signal (requests "
               "drained in %.2f s)\n",
               absl::ToDoubleSeconds(absl::Now() - signalled),
               absl::ToDoubleSeconds(drained - signalled));
  return 0;
}

}  // namespace
}  // namespace ringmoe::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ringmoe_server --model DIR [--model_name NAME] [--host H] [--grpc_port "
      "P] "
      "[--metrics_port P] [scheduler and engine flags; --helpfull lists them]");
  absl::ParseCommandLine(argc, argv);
  return ringmoe::server::Serve();
}
