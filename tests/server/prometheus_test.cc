// /metrics against the real Prometheus tools (Debian package `prometheus`, installed by
// scripts/install_deps.sh): `promtool check metrics` accepts the text, and a real prometheus
// server scraping the daemon on loopback can select a job's series by `job_id` (the scrape job's
// `job` label stays its own; no `exported_job`). Each test skips where the tool is absent.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

bool on_path(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
}

std::string metrics_body(int port) {
  const std::string resp = http_get(port, "/metrics");
  const auto at = resp.find("\r\n\r\n");
  return at == std::string::npos ? "" : resp.substr(at + 4);
}

// A free loopback TCP port (bound, read, released: the tool binds it right after).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A prometheus server on loopback scraping 127.0.0.1:`target` every second; killed at the end.
struct PrometheusServer {
  pid_t pid = -1;
  int port = free_port();
  std::string dir;

  PrometheusServer(const std::string& dir_, int target) : dir(dir_) {
    std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                           << "scrape_configs:\n  - job_name: mt-scrape\n"
                                           << "    static_configs:\n      - targets: ['127.0.0.1:" << target
                                           << "']\n";
    pid = ::fork();
    if (pid == 0) {
      const std::string cfg = "--config.file=" + dir + "/prometheus.yml";
      const std::string tsdb = "--storage.tsdb.path=" + dir + "/tsdb";
      const std::string web = "--web.listen-address=127.0.0.1:" + std::to_string(port);
      std::freopen((dir + "/prometheus.log").c_str(), "w", stderr);
      ::execlp("prometheus", "prometheus", cfg.c_str(), tsdb.c_str(), web.c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~PrometheusServer() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // The JSON answer of an instant query; "" when the server is not answering (yet).
  std::string query(const std::string& promql) const {
    const std::string resp = http_get(port, "/api/v1/query?query=" + promql);
    const auto at = resp.find("\r\n\r\n");
    return at == std::string::npos ? "" : resp.substr(at + 4);
  }
};

TEST(ServerPrometheus, PromtoolAcceptsTheMetricsText) {
  if (!on_path("promtool")) GTEST_SKIP() << "promtool is not installed (scripts/install_deps.sh installs it)";
  const std::string dir = fresh_dir("promtool");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  v1::JobSpec spec = tiny_spec(2);  // with a held-out set: megatrain_eval_loss too
  spec.mutable_eval()->mutable_data()->set_source("synthetic");
  spec.mutable_eval()->set_max_tokens(128);
  const std::string id = submit(*s.stub, spec);
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);
  submit(*s.stub, tiny_spec(1, "push"));  // per-job series of every kind
  const std::string body = metrics_body(s.daemon->metrics_port());
  EXPECT_NE(body.find("\nmegatrain_eval_loss{"), std::string::npos);
  std::ofstream(dir + "/metrics.txt") << body;
  const std::string cmd = "promtool check metrics < " + dir + "/metrics.txt > " + dir + "/promtool.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir + "/promtool.txt");
  const std::string report((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << report;
}

TEST(ServerPrometheus, RealScrapeSelectsSeriesByJobId) {
  if (!on_path("prometheus")) GTEST_SKIP() << "prometheus is not installed (scripts/install_deps.sh installs it)";
  const std::string dir = fresh_dir("prometheus");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(2));
  ASSERT_EQ(id, "job-000001");
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);

  PrometheusServer prom(dir, s.daemon->metrics_port());
  // Wait (bounded) for a scrape that carries the job's series.
  const std::string q = "megatrain_steps_total%7Bjob_id%3D%22job-000001%22%7D";  // {job_id="job-000001"}
  std::string answer;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < end) {
    answer = prom.query(q);
    if (answer.find("\"result\":[{") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_NE(answer.find("\"result\":[{"), std::string::npos) << "no scrape within 40 s: " << answer;
  EXPECT_NE(answer.find("\"job_id\":\"job-000001\""), std::string::npos) << answer;
  EXPECT_NE(answer.find("\"job\":\"mt-scrape\""), std::string::npos) << answer;
  EXPECT_EQ(answer.find("exported_job"), std::string::npos) << answer;
  EXPECT_NE(answer.find("\"2\"]"), std::string::npos) << "two steps: " << answer;
  // The dashboard's grouping keeps jobs apart.
  const std::string by_job = prom.query("sum%20by%20(job_id)%20(megatrain_steps_total)");
  EXPECT_NE(by_job.find("\"job_id\":\"job-000001\""), std::string::npos) << by_job;
}

}  // namespace
}  // namespace mt::server::testing
