// /metrics scraped over HTTP after a job and parsed: every DESIGN §6 metric with sane values.
#include <filesystem>
#include <fstream>
#include <cctype>
#include <cerrno>
#include <map>
#include <set>
#include <sstream>

#include "tests/server/schedule_util.h"
#include "tests/test_paths.h"

namespace mt::server::testing {
namespace {

// "name{labels} value" lines -> value by "name{labels}".
std::map<std::string, double> parse_exposition(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// A held-out evaluation every 3 steps over 128 tokens of another chain.
v1::JobSpec with_eval(v1::JobSpec s) {
  v1::EvalSpec* e = s.mutable_eval();
  e->mutable_data()->set_source("synthetic");
  e->mutable_data()->set_seed(11);
  e->set_every(3);
  e->set_max_tokens(128);
  return s;
}

double get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "missing series " << key;
  return it == m.end() ? -1 : it->second;
}

TEST(ServerMetrics, EveryDesignMetricIsExportedWithSaneValues) {
  Server s(test_config(fresh_dir("metrics")));
  ASSERT_TRUE(s.stub);
  ASSERT_GT(s.daemon->metrics_port(), 0);
  const std::string id = submit(*s.stub, with_eval(tiny_spec(6)));
  const v1::Job done = wait_terminal(*s.stub, id);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  const std::string push = submit(*s.stub, tiny_spec(1, "push"));  // a queue for data_queue_tokens

  const std::string resp = http_get(s.daemon->metrics_port(), "/metrics");
  ASSERT_NE(resp.find("200 OK"), std::string::npos) << resp.substr(0, 200);
  const auto m = parse_exposition(resp.substr(resp.find("\r\n\r\n") + 4));
  const std::string j = "{job_id=\"" + id + "\"}";

  EXPECT_EQ(get(m, "megatrain_steps_total" + j), 6);
  EXPECT_EQ(get(m, "megatrain_tokens_total" + j), 6 * 4 * 32);
  EXPECT_GE(get(m, "megatrain_h2d_bytes_total" + j), 0);
  EXPECT_GE(get(m, "megatrain_d2h_bytes_total" + j), 0);
  EXPECT_GE(get(m, "megatrain_gpu_stall_seconds_total" + j), 0);
  EXPECT_EQ(get(m, "megatrain_step_seconds_count" + j), 6);
  EXPECT_GT(get(m, "megatrain_step_seconds_sum" + j), 0);
  EXPECT_EQ(get(m, "megatrain_optimizer_seconds_count" + j), 6);
  const double loss = get(m, "megatrain_loss" + j);
  EXPECT_GT(loss, 0);
  EXPECT_LT(loss, 10);
  EXPECT_GT(get(m, "megatrain_tokens_per_second" + j), 0);
  EXPECT_GT(get(m, "megatrain_grad_norm" + j), 0);
  EXPECT_EQ(done.eval_step(), 6);  // every 3 steps and the end: steps 3 and 6
  EXPECT_EQ(get(m, "megatrain_eval_loss" + j), done.eval_loss());
  EXPECT_EQ(get(m, "megatrain_best_eval_loss" + j), done.best_eval_loss());
  EXPECT_GT(done.eval_loss(), 0);
  EXPECT_EQ(get(m, "megatrain_checkpoint_step" + j), 6);  // the job's last checkpoint
  EXPECT_GT(get(m, "megatrain_checkpoint_bytes" + j), 4 * 4 * 1000);  // weights and moments of a tiny model
  EXPECT_GT(get(m, "megatrain_checkpoint_write_seconds" + j), 0);
  EXPECT_GE(get(m, "megatrain_checkpoint_pause_seconds" + j), get(m, "megatrain_checkpoint_write_seconds" + j))
      << "written between steps (the last), the training paused for the whole write";
  const double clipped = get(m, "megatrain_grad_clipped" + j);
  EXPECT_TRUE(clipped == 0 || clipped == 1) << clipped;
  const double lr = get(m, "megatrain_learning_rate" + j);  // the spec's 3e-3, scheduled
  EXPECT_GT(lr, 0);
  EXPECT_LE(lr, 3e-3 * (1 + 1e-6));
  EXPECT_GE(get(m, "megatrain_h2d_bandwidth_bytes_per_second" + j), 0);
  EXPECT_GE(get(m, "megatrain_d2h_bandwidth_bytes_per_second" + j), 0);
  const double mfu = get(m, "megatrain_model_flops_utilization" + j);
  EXPECT_GT(mfu, 0);
  EXPECT_LE(mfu, 1);
  EXPECT_GE(get(m, "megatrain_host_memory_bytes{kind=\"total\"}"), 0);
  EXPECT_GE(get(m, "megatrain_device_memory_bytes{kind=\"total\"}"), 0);
  EXPECT_EQ(get(m, "megatrain_jobs{state=\"succeeded\"}"), 1);
  EXPECT_EQ(get(m, "megatrain_jobs{state=\"failed\"}"), 0);
  EXPECT_GE(get(m, "megatrain_jobs{state=\"running\"}") + get(m, "megatrain_jobs{state=\"queued\"}"), 1);
  EXPECT_EQ(get(m, "megatrain_job_data_queue_tokens{job_id=\"" + push + "\"}"), 0);
  EXPECT_EQ(get(m, "megatrain_data_queue_tokens"), 0);
  for (const auto& [key, v] : m) EXPECT_EQ(key.find("{job=\""), std::string::npos) << key;
}

// The Grafana dashboard (deploy/grafana) plots only series the daemon exports: every
// megatrain_* name in its queries is in /metrics after a job (a histogram by its _bucket, _sum
// and _count), so a renamed or missing metric cannot leave a panel silently empty.
TEST(ServerMetrics, EveryDashboardQueryNamesAnExportedSeries) {
  Server s(test_config(fresh_dir("metrics_dashboard")));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, with_eval(tiny_spec(2)));  // the held-out loss's series
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);
  (void)submit(*s.stub, tiny_spec(1, "push"));  // a push job: its queue series
  const std::string body = http_get(s.daemon->metrics_port(), "/metrics");
  std::ifstream in(std::string(mt::testing_util::source_dir()) + "/deploy/grafana/megatrain-dashboard.json");
  ASSERT_TRUE(in) << "the dashboard is at deploy/grafana/megatrain-dashboard.json";
  const std::string dash((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto in_name = [](char c) { return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'; };
  std::set<std::string> names;
  for (size_t at = dash.find("megatrain_"); at != std::string::npos; at = dash.find("megatrain_", at + 1)) {
    size_t end = at;
    while (end < dash.size() && in_name(dash[end])) ++end;
    names.insert(dash.substr(at, end - at));
  }
  EXPECT_TRUE(names.count("megatrain_grad_norm") && names.count("megatrain_learning_rate")) << "the dashboard's panels";
  for (const std::string& n : names)
    EXPECT_NE(body.find("\n" + n + "{"), std::string::npos) << n << " is queried by the dashboard but not exported";
}

// Issue 11 (13): the data queue gauge exists before any push job does (a dashboard or alert on it
// must not see "no data" on a fresh daemon), as the unlabelled total.
// A restarted daemon loads each job's record: a scrape shows its held-out losses and latest
// checkpoint step as `status` does (before, none until its next evaluation or checkpoint), and
// its TensorBoard directory stays in its status. A deleted job's series leave /metrics.
TEST(ServerMetrics, JobSeriesFollowTheRecordAcrossARestartAndLeaveWithTheJob) {
  const std::string dir = fresh_dir("metrics_restart");
  v1::JobSpec spec = with_eval(tiny_spec(6));
  spec.mutable_checkpoint()->set_every(3);
  spec.mutable_logging()->set_tensorboard(true);
  std::string id;
  v1::Job before;
  {
    Server s(test_config(dir));
    ASSERT_TRUE(s.stub);
    id = submit(*s.stub, spec);
    before = wait_terminal(*s.stub, id);
    ASSERT_EQ(before.state(), v1::JOB_STATE_SUCCEEDED) << before.reason();
  }
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  v1::Job after;
  ASSERT_TRUE(get_job(*s.stub, id, &after).ok());
  EXPECT_FALSE(before.tensorboard_dir().empty());
  EXPECT_EQ(after.tensorboard_dir(), before.tensorboard_dir());
  const std::string l = "{job_id=\"" + id + "\"}";
  const std::string scraped = http_get(s.daemon->metrics_port(), "/metrics");
  ASSERT_NE(scraped.find("\r\n\r\n"), std::string::npos) << scraped.substr(0, 200);
  const auto m = parse_exposition(scraped.substr(scraped.find("\r\n\r\n") + 4));
  EXPECT_EQ(get(m, "megatrain_eval_loss" + l), after.eval_loss());
  EXPECT_EQ(get(m, "megatrain_best_eval_loss" + l), after.best_eval_loss());
  EXPECT_EQ(get(m, "megatrain_checkpoint_step" + l), 6);
  v1::DeleteJobResponse resp;
  ASSERT_TRUE(delete_job(*s.stub, id, false, &resp).ok());
  const std::string body = http_get(s.daemon->metrics_port(), "/metrics");
  EXPECT_EQ(body.find(id), std::string::npos) << "a deleted job's series stay: " << body.substr(0, 2000);
}

TEST(ServerMetrics, DeletedJobsLeaveNoSeriesBehind) {
  Server s(test_config(fresh_dir("metrics_delete")));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, with_eval(tiny_spec(3)));
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_NE(http_get(s.daemon->metrics_port(), "/metrics").find("megatrain_steps_total{job_id=\"" + id), std::string::npos);
  v1::DeleteJobResponse resp;
  ASSERT_TRUE(delete_job(*s.stub, id, false, &resp).ok());
  const std::string body = http_get(s.daemon->metrics_port(), "/metrics");
  EXPECT_EQ(body.find(id), std::string::npos) << body.substr(0, 2000);
  EXPECT_NE(body.find("megatrain_jobs{state=\"succeeded\"} 0"), std::string::npos);
  // Nothing runs: every memory kind is 0, the eval_set only that job's plan had too (it kept
  // the job's bytes beside a later job's total).
  const auto m = parse_exposition(body.substr(body.find("\r\n\r\n") + 4));
  size_t kinds = 0;
  for (const auto& [series, value] : m)
    if (series.rfind("megatrain_host_memory_bytes{", 0) == 0 || series.rfind("megatrain_device_memory_bytes{", 0) == 0) {
      ++kinds;
      EXPECT_EQ(value, 0) << series;
    }
  EXPECT_GT(kinds, 12u);
  EXPECT_NE(m.find("megatrain_host_memory_bytes{kind=\"eval_set\"}"), m.end());
}

TEST(ServerMetrics, DataQueueTokensIsExportedBeforeAnyPushJob) {
  Server s(test_config(fresh_dir("metrics_queue")));
  ASSERT_TRUE(s.stub);
  const std::string resp = http_get(s.daemon->metrics_port(), "/metrics");
  const auto m = parse_exposition(resp.substr(resp.find("\r\n\r\n") + 4));
  EXPECT_EQ(get(m, "megatrain_data_queue_tokens"), 0);
}

// Pushed tokens not yet trained on survive a restart in the spool, and in the gauge: it read 0
// after a restart until the job's next step (a defect hunt), hours later for a queued job.
TEST(ServerMetrics, TheDataQueueAfterARestartIsWhatTheSpoolHolds) {
  const std::string dir = fresh_dir("metrics_queue_restart");
  std::string push;
  const auto queued = [&](Server& s) {
    const std::string resp = http_get(s.daemon->metrics_port(), "/metrics");
    const auto m = parse_exposition(resp.substr(resp.find("\r\n\r\n") + 4));
    return std::make_pair(get(m, "megatrain_job_data_queue_tokens{job_id=\"" + push + "\"}"),
                          get(m, "megatrain_data_queue_tokens"));
  };
  {
    Server s(test_config(dir));
    ASSERT_TRUE(s.stub);
    push = submit(*s.stub, tiny_spec(1, "push"));
    v1::PushDataRequest chunk;  // fewer tokens than a step takes: they stay spooled
    chunk.set_job_id(push);
    chunk.set_push_id("p");
    for (uint32_t t = 0; t < 50; ++t) chunk.add_tokens(t % 200);
    v1::PushDataResponse resp;
    auto c = ctx();
    auto w = s.stub->PushData(c.get(), &resp);
    ASSERT_TRUE(w->Write(chunk));
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_EQ(queued(s), std::make_pair(50.0, 50.0));
  }
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  EXPECT_EQ(queued(s), std::make_pair(50.0, 50.0));
}

// Clients that connect and never finish a request (a slowloris, a half-open scraper) hold up no
// one's scrape: it is answered while they are still connected, and past 64 open connections the
// oldest is dropped. (One connection at a time, each given 2 s, a scrape waited 2 s for each.)
TEST(ServerMetrics, SlowClientsHoldUpNoScrape) {
  Server s(test_config(fresh_dir("metrics_slow")));
  ASSERT_TRUE(s.stub);
  const int port = s.daemon->metrics_port();
  auto connect_partial = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::write(fd, "GET /met", 8), 8);  // and no more
    return fd;
  };
  auto closed = [](int fd) {  // by the daemon: the end of the stream, or a reset
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  };
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(connect_partial());
  std::string resp = http_get(port, "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200 OK", 0), 0u) << resp.substr(0, 200);
  EXPECT_NE(resp.find("megatrain_data_queue_tokens"), std::string::npos);
  for (int fd : slow) EXPECT_FALSE(closed(fd)) << "a slow client was dropped before the scrape was answered";
  while (slow.size() < 70) slow.push_back(connect_partial());
  resp = http_get(port, "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200 OK", 0), 0u) << resp.substr(0, 200);
  EXPECT_TRUE(closed(slow.front())) << "the oldest of 70 open connections is dropped";
  EXPECT_FALSE(closed(slow.back()));
  for (int fd : slow) ::close(fd);
}

// A jsonl job reports its packing efficiency in GetJob and as megatrain_packing_efficiency; a job
// whose every slot is a real token (synthetic) has neither.
TEST(ServerMetrics, PackingEfficiencyOfAJsonlJobInStatusAndMetrics) {
  const std::string dir = fresh_dir("metrics_packing");
  auto s = std::make_unique<Server>(test_config(dir));
  ASSERT_TRUE(s->stub);
  std::filesystem::create_directories(dir + "/data");
  std::string lines;
  for (int i = 0; i < 200; ++i)
    lines += "{\"prompt\": \"say " + std::to_string(i) + ": \", \"completion\": \"" + std::string(size_t(1 + i % 13), 'x') + "\"}\n";
  std::ofstream(dir + "/data/sft.jsonl") << lines;
  v1::JobSpec spec = tiny_spec(5, "jsonl");
  spec.mutable_data()->set_path("sft.jsonl");  // under --data_root
  spec.mutable_data()->set_tokenizer("byte");
  const std::string id = submit(*s->stub, spec);
  const std::string plain = submit(*s->stub, tiny_spec(2));
  const v1::Job job = wait_terminal(*s->stub, id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  ASSERT_EQ(wait_terminal(*s->stub, plain).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(job.has_packing_efficiency());
  EXPECT_GT(job.packing_efficiency(), 0.5);
  EXPECT_LE(job.packing_efficiency(), 1.0);
  EXPECT_EQ(job.spec().data().source(), "jsonl");
  EXPECT_TRUE(job.spec().data().packing()) << "the default, as the engine read it";

  const std::string resp = http_get(s->daemon->metrics_port(), "/metrics");
  const auto m = parse_exposition(resp.substr(resp.find("\r\n\r\n") + 4));
  EXPECT_NEAR(get(m, "megatrain_packing_efficiency{job_id=\"" + id + "\"}"), job.packing_efficiency(), 1e-9);
  EXPECT_EQ(m.count("megatrain_packing_efficiency{job_id=\"" + plain + "\"}"), 0u);
  // After a restart, status shows the last step's update as before (it was kept in memory only).
  s.reset();
  s = std::make_unique<Server>(test_config(dir));
  ASSERT_TRUE(s->stub);
  v1::Job again;
  ASSERT_TRUE(get_job(*s->stub, id, &again).ok());
  EXPECT_EQ(again.packing_efficiency(), job.packing_efficiency());
  EXPECT_EQ(again.grad_norm(), job.grad_norm());
  EXPECT_EQ(again.learning_rate(), job.learning_rate());
  EXPECT_GT(again.grad_norm(), 0);
  ASSERT_TRUE(get_job(*s->stub, plain, &again).ok());
  EXPECT_FALSE(again.has_packing_efficiency());
}

}  // namespace
}  // namespace mt::server::testing
