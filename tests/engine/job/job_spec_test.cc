// JobSpec: a spec parses strictly (numbers that overflow their field, unknown keys and data keys
// its source does not read are refused by name) and round-trips through JSON; priority and
// logging stay out of the trajectory's hash.
#include <gtest/gtest.h>

#include "engine/job/job.h"
#include "tests/engine/job/spec_refusals.h"
#include "tests/engine/job/tiny_job.h"

namespace mt {
namespace {

using testing_util::tiny_spec;

// Numbers that do not fit their field are refused by name: never clamped (steps), never an
// infinity in training (eps, weight_decay, lr overflow a float).
TEST(JobSpec, NumbersThatOverflowTheirFieldAreRefusedByName) {
  testing_util::expect_spec_refusals({
      {R"("steps": 99999999999999999999)", "steps"},
      {R"("steps": "99999999999999999999")", "steps"},  // protobuf's JSON writes int64 as strings
      {R"("seq_len": 4294967296)", "seq_len"},
      {R"("optimizer": {"eps": 1e300})", "optimizer.eps"},
      {R"("optimizer": {"weight_decay": 1e300})", "optimizer.weight_decay"},
      {R"("optimizer": {"lr": 1e39})", "optimizer.lr"},
      {R"("optimizer": {"betas": [1e300, 0.9]})", "optimizer.betas[0]"},
      {R"("schedule": {"min_lr_ratio": -1e300})", "schedule.min_lr_ratio"},
      {R"("data": {"seed": -1})", "data.seed"},
      {R"("seq_len": 2000000)", "seq_len"},
      // Bounded, so a spec cannot make a job allocate without bound (issue 11.6).
      {R"("slots": 1000000)", "slots"},
      {R"("link_gbps": 1e-6)", "link_gbps"},  // a step's emulated copies outlived cancel and shutdown
      {R"("link_gbps": 1e-300)", "link_gbps"},
      {R"("link_gbps": -1)", "link_gbps"},
      {R"("data": {"active_vocab": 1000000})", "data.active_vocab"},
      {R"("data": {"branching": 1000000})", "data.branching"},
  });
  // A spec naming 1e999 does not even parse: no infinity reaches the reader.
  EXPECT_FALSE(Json::parse(R"({"optimizer": {"eps": 1e999}})").ok());
}

// A data key its source does not read is refused, naming the key and who reads it; the same
// keys on a source that reads them are accepted.
TEST(JobSpec, DataKeysTheSourceDoesNotReadAreRefused) {
  testing_util::expect_spec_refusals({
      {R"("data": {"source": "text", "path": "a.txt", "tokenizer": "model"})",
       "data.tokenizer does not apply to data.source = text: only jsonl"},
      {R"("data": {"source": "text", "path": "a.txt", "epochs": 2})", "data.epochs does not apply"},
      {R"("data": {"source": "tokens", "path": "a.bin", "packing": false})", "data.packing does not apply"},
      {R"("data": {"source": "shards", "path": "s", "chat_template": "chatml"})", "data.chat_template does not apply"},
      {R"("data": {"source": "synthetic", "path": "a.txt"})", "data.path does not apply to data.source = synthetic"},
      {R"("data": {"source": "jsonl", "path": "a.jsonl", "dtype": "uint32"})", "data.dtype does not apply"},
      {R"("data": {"source": "text", "path": "a.txt", "branching": 2})", "data.branching does not apply"},
      {R"("eval": {"data": {"source": "text", "path": "a.txt", "format": "messages"}})",
       "eval.data.format does not apply"},
  });
  // A chat template a format without chats would ignore (a defect hunt found it silently unused).
  for (const char* format : {"text", "prompt_completion"})
    testing_util::expect_spec_refusals({{(R"("data": {"source": "jsonl", "path": "a.jsonl", "tokenizer": "byte", "format": ")" +
                                          std::string(format) + R"(", "chat_template": "chatml"})").c_str(),
                                         "data.chat_template does not apply"}});
  for (const char* ok : {R"({"source": "jsonl", "path": "a.jsonl", "tokenizer": "byte", "format": "messages", "epochs": 1,
                              "packing": false, "long_examples": "truncate", "chat_template": "chatml"})",
                         R"({"source": "jsonl", "path": "a.jsonl", "tokenizer": "byte", "chat_template": "chatml"})",
                         R"({"source": "shards", "path": "s", "epochs": 2, "packing": false})",
                         R"({"source": "tokens", "path": "a.bin", "dtype": "uint32"})",
                         R"({"source": "synthetic", "active_vocab": 8, "branching": 2})"}) {
    auto j = Json::parse(R"({"model": {"preset": "tiny"}, "data": )" + std::string(ok) + "}");
    ASSERT_TRUE(j.ok()) << ok;
    auto spec = job_spec_from_json(*j);
    EXPECT_TRUE(spec.ok()) << ok << ": " << spec.status().to_string();
  }
}

TEST(JobSpec, UnknownKeyIsNamed) {
  auto j = Json::parse(R"({"model": {"preset": "tiny"}, "optimiser": {"lr": 0.1}})");
  auto s = job_spec_from_json(*j);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'optimiser'"), std::string::npos) << s.status().message();
}

TEST(JobSpec, NestedUnknownKeyAndBadValueAreNamed) {
  auto s = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "optimizer": {"learning_rate": 1}})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'optimizer.learning_rate'"), std::string::npos) << s.status().message();
  s = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "global_batch": 6, "micro_batch": 4})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("global_batch = 6"), std::string::npos) << s.status().message();
  s = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "seq_len": "long"})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("seq_len"), std::string::npos) << s.status().message();
}

TEST(JobSpec, JsonRoundTripAndIntegerStrings) {
  JobSpec a = tiny_spec("streaming", 7);
  auto b = job_spec_from_json(job_spec_to_json(a));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(job_spec_hash(a), job_spec_hash(*b));
  auto c = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "steps": "12"})"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->steps, 12);
  // A uint64 seed past INT64_MAX (protobuf writes it as a string) round-trips exactly.
  auto d = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "init": {"seed": "18446744073709551615"}})"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->init.seed, UINT64_MAX);
  auto e = job_spec_from_json(job_spec_to_json(*d));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->init.seed, UINT64_MAX);
}

// The daemon's priority round-trips, and is not part of the trajectory: a checkpoint written at
// one priority resumes at another (and a spec without it hashes as before it existed).
TEST(JobSpec, PriorityRoundTripsAndStaysOutOfTheHash) {
  JobSpec a = tiny_spec("streaming", 7);
  const std::string before = job_spec_hash(a);
  EXPECT_EQ(job_spec_to_json(a).find("priority"), nullptr);
  a.priority = -3;
  auto b = job_spec_from_json(job_spec_to_json(a));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->priority, -3);
  EXPECT_EQ(job_spec_hash(*b), before);
  auto c = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "priority": 1.5})"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("priority"), std::string::npos) << c.status().message();
}

TEST(JobSpec, LoggingRoundTripsAndStaysOutOfTheHash) {
  JobSpec a = tiny_spec("streaming", 7);
  const std::string before = job_spec_hash(a);
  EXPECT_EQ(job_spec_to_json(a).find("logging"), nullptr);
  a.logging.tensorboard = true;
  auto b = job_spec_from_json(job_spec_to_json(a));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_TRUE(b->logging.tensorboard);
  EXPECT_EQ(job_spec_hash(*b), before);
  auto c = job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "logging": {"tensorbord": true}})"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensorbord"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace mt
