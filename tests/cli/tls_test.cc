// --tls-ca (and MEGATRAIN_TLS_CA) against a daemon serving TLS with a self-signed certificate
// made by openssl for this test; skipped where openssl is not installed.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

TEST(CliTls, ServerCertificateIsVerified) {
  const std::string openssl = "/usr/bin/openssl";
  if (!fs::exists(openssl)) GTEST_SKIP() << "no " << openssl;
  const std::string dir = fresh_dir("tls");
  RunResult gen = run_process({openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                               "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
                               dir + "/key.pem", "-out", dir + "/cert.pem"},
                              {}, 60);
  ASSERT_EQ(gen.rc, 0) << describe(gen);
  const std::string token = write_file(dir + "/token", "0123456789abcdef0123456789abcdef");
  DaemonProcess d("tls_daemon",
                  {"--tls_cert=" + dir + "/cert.pem", "--tls_key=" + dir + "/key.pem", "--auth_token_file=" + token});
  ASSERT_TRUE(d.ok()) << d.log();

  RunResult ok = d.cli({"list", "--json", "--tls-ca", dir + "/cert.pem", "--token-file", token});
  EXPECT_EQ(ok.rc, 0) << describe(ok) << d.log();
  RunResult env = megatrain({"list"}, {{"MEGATRAIN_SERVER", d.address()},
                                       {"MEGATRAIN_TLS_CA", dir + "/cert.pem"},
                                       {"MEGATRAIN_TOKEN_FILE", token}});
  EXPECT_EQ(env.rc, 0) << describe(env);
  // Plaintext to a TLS port, or TLS without the token: the server is unreachable / refuses us.
  RunResult plain = d.cli({"list", "--token-file", token}, 60);
  EXPECT_EQ(plain.rc, 3) << describe(plain);
  RunResult no_token = d.cli({"list", "--tls-ca", dir + "/cert.pem"});
  EXPECT_EQ(no_token.rc, 3) << describe(no_token);
  // A CA that did not sign the server's certificate: the handshake fails, exit 3.
  RunResult other = run_process({openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                                 "/CN=other", "-keyout", dir + "/other-key.pem", "-out", dir + "/other.pem"},
                                {}, 60);
  ASSERT_EQ(other.rc, 0) << describe(other);
  RunResult wrong_ca = d.cli({"list", "--tls-ca", dir + "/other.pem", "--token-file", token}, 60);
  EXPECT_EQ(wrong_ca.rc, 3) << describe(wrong_ca);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing
