// The daemon's configuration, checked before it serves: the security rules (TLS and tokens off
// loopback), sizes, the directories a spec must not reach, and listen addresses.
#include "server/config.h"

#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

TEST(ServerConfig, SecurityRulesAndSizes) {
  EXPECT_TRUE(is_loopback_listen("127.0.0.1:50051"));
  EXPECT_TRUE(is_loopback_listen("localhost:1"));
  EXPECT_TRUE(is_loopback_listen("[::1]:50051"));
  EXPECT_FALSE(is_loopback_listen("0.0.0.0:50051"));
  EXPECT_FALSE(is_loopback_listen("[::]:50051"));
  DaemonConfig c = test_config(fresh_dir("cfg"));
  c.listen = "0.0.0.0:50051";
  Status st = finalize_config(c);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("--insecure"), std::string::npos);
  c.insecure = true;
  EXPECT_TRUE(finalize_config(c).ok());
  c.max_message_bytes = (64 << 10) - 1;  // below one Job message at its largest
  EXPECT_NE(finalize_config(c).message().find("--max_message_bytes"), std::string::npos);
  c.max_message_bytes = 64 << 10;
  c.max_streams = 0;
  EXPECT_NE(finalize_config(c).message().find("--max_streams"), std::string::npos);
  c.max_streams = 1;
  EXPECT_TRUE(finalize_config(c).ok());
  EXPECT_EQ(*parse_size_flag("--host_memory", "64G"), 64ull << 30);  // the rule: tests/engine/base/byte_size_test
  const Status bad = parse_size_flag("--host_memory", "12Q").status();
  EXPECT_NE(bad.message().find("--host_memory: '12Q'"), std::string::npos) << bad.message();
}

// The state directory inside the data root (or the data root in STATE_DIR/jobs) let a spec name
// the daemon's own files (an export with overwrite into STATE_DIR/jobs/ID). Refused at start; the
// default (data root STATE_DIR/data) and separate directories start.
TEST(ServerConfig, ADataRootOverlappingTheDaemonsOwnFilesIsRefused) {
  const std::string dir = fresh_dir("cfg_nesting");
  DaemonConfig c = test_config(dir + "/state");
  EXPECT_TRUE(finalize_config(c).ok());  // data root STATE_DIR/data
  for (const std::string& root :
       {dir, dir + "/state", dir + "/./state/..", dir + "/state/jobs", dir + "/state/jobs/some-job"}) {
    DaemonConfig nested = test_config(dir + "/state");
    nested.data_root = root;
    const Status st = finalize_config(nested);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << root;
    EXPECT_NE(st.message().find("overlap where a job spec could name the daemon's own files"), std::string::npos)
        << st.message();
  }
  DaemonConfig beside_jobs = test_config(dir + "/state");
  beside_jobs.data_root = dir + "/state/jobs-data";  // inside the state dir, beside jobs/
  EXPECT_TRUE(finalize_config(beside_jobs).ok());
  DaemonConfig apart = test_config(dir + "/state");
  apart.data_root = dir + "/state-data";  // a sibling whose name begins with the state dir's
  EXPECT_TRUE(finalize_config(apart).ok());
  DaemonConfig sibling = test_config(dir + "/state-x");
  sibling.data_root = dir + "/state";  // the state dir's name begins with the root's: not inside
  EXPECT_TRUE(finalize_config(sibling).ok());
}

// Issue 11, point 8: --listen=127.0.0.1:99999 served on port 34463 (99999 mod 65536). Every
// address flag is checked: host present, port numeric in 0..65535 (0: any free port).
TEST(ServerConfig, ListenAddressesAreValidated) {
  const std::pair<std::string, std::string> bad[] = {
      {"127.0.0.1:99999", "port 99999 is not in 0..65535"}, {"127.0.0.1:http", "port 'http' is not a number"},
      {":50051", "no host"}, {"127.0.0.1", "no port"}, {"127.0.0.1:-5", "not a number"}, {"unix:", "socket path"}};
  for (const auto& [address, why] : bad)
    for (const bool metrics : {false, true}) {
      if (metrics && address == "unix:") continue;
      DaemonConfig c = test_config(fresh_dir("listen"));
      (metrics ? c.metrics_listen : c.listen) = address;
      Status st = finalize_config(c);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << address;
      EXPECT_NE(st.message().find(metrics ? "--metrics_listen" : "--listen"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    }
  DaemonConfig ok = test_config(fresh_dir("listen_ok"));
  ok.metrics_listen = "";  // off
  EXPECT_TRUE(finalize_config(ok).ok());
}

}  // namespace
}  // namespace mt::server::testing
