// `megatrain train SPEC --out DIR` on a DIR that holds the job's checkpoints resumes it: a
// finished job reports what it saved (issue 11.3), and a different `steps` is refused rather
// than silently changing the LR schedule (issue 11.13).
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

// The run's summary line (an empty object when it printed none).
Json summary(const RunResult& r) {
  auto lines = r.json_lines();
  if (lines.empty() || !lines.back().find("event") || lines.back().find("event")->as_string() != "summary")
    return Json::object();
  return lines.back();
}

TEST(CliTrain, RerunOfAFinishedJobPrintsTheSavedLoss) {
  const std::string dir = fresh_dir("train_rerun");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  RunResult first = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(first.rc, 0) << describe(first);
  const Json s1 = summary(first);
  ASSERT_TRUE(s1.find("final_loss") && s1.find("checkpoint")) << describe(first);
  const std::string loss = s1.find("final_loss")->dump();
  const std::string checkpoint = s1.find("checkpoint")->as_string();

  RunResult again = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(again.rc, 0) << describe(again);
  const Json summary2 = summary(again);
  const Json* s = &summary2;
  ASSERT_TRUE(s->find("final_loss")) << describe(again);
  EXPECT_EQ(s->find("final_loss")->dump(), loss) << s->dump();
  EXPECT_NE(loss, "0");
  EXPECT_EQ(s->find("steps")->dump(), "3");
  EXPECT_EQ(s->find("tokens_per_second"), nullptr) << "no throughput was measured: " << s->dump();
  ASSERT_TRUE(s->find("note")) << s->dump();
  EXPECT_NE(s->find("note")->as_string().find("nothing to train"), std::string::npos);
  EXPECT_EQ(s->find("checkpoint")->as_string(), checkpoint);
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(CliTrain, ResumeWithADifferentStepsIsRefused) {
  const std::string dir = fresh_dir("train_steps");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(2));
  RunResult first = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(first.rc, 0) << describe(first);
  RunResult longer = megatrain({"train", spec, "--json", "--out", dir + "/run", "--steps", "4"});
  EXPECT_EQ(longer.rc, 2) << describe(longer);  // a spec error
  EXPECT_NE(longer.err.find("steps = 4 differs from the steps = 2"), std::string::npos) << describe(longer);
  // Another field of the trajectory: refused naming it and both values.
  std::string yaml = tiny_spec_yaml(2);
  yaml.replace(yaml.find("seq_len: 32"), 11, "seq_len: 16");
  RunResult shorter = megatrain({"train", write_file(dir + "/short.yaml", yaml), "--json", "--out", dir + "/run"});
  EXPECT_EQ(shorter.rc, 2) << describe(shorter);
  EXPECT_NE(shorter.err.find("seq_len 32 -> 16"), std::string::npos) << describe(shorter);
  if (!HasFailure()) fs::remove_all(dir);
}

// The same spec over data rewritten in place resumes, but says so (it used to be silent): the
// checkpoint's description of its data against the data now.
TEST(CliTrain, ResumeOverRewrittenDataSaysSo) {
  const std::string dir = fresh_dir("train_rewritten_data");
  const std::string data = write_file(dir + "/d.txt", std::string(20000, 'a') + "bcd\n");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3, "{source: text, path: " + data + "}"));
  RunResult first = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(first.rc, 0) << describe(first);
  EXPECT_EQ(first.err.find("the data is not what"), std::string::npos) << describe(first);
  RunResult same = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  EXPECT_EQ(same.err.find("the data is not what"), std::string::npos) << describe(same);
  write_file(data, std::string(9000, 'z'));
  RunResult rewritten = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  EXPECT_EQ(rewritten.rc, 0) << describe(rewritten);
  EXPECT_NE(rewritten.err.find("the data is not what"), std::string::npos) << describe(rewritten);
  EXPECT_NE(rewritten.err.find("20004 bytes"), std::string::npos) << describe(rewritten);
  EXPECT_NE(rewritten.err.find("9000 bytes"), std::string::npos) << describe(rewritten);
}

// jsonl and shards edited to the same example count (lines reordered) describe themselves
// otherwise (", contents ..."): a resume over them says so, as over a rewritten text file.
// Before, their description was the path and the counts, and the run resumed silently at its
// row cursor (reordered shards repeat some examples that epoch and skip others).
TEST(CliTrain, ResumeOverReorderedExamplesSaysSo) {
  const std::string dir = fresh_dir("train_reordered_examples");
  const std::string lines = "{\"text\": \"the first example, a little longer\"}\n{\"text\": \"a second one\"}\n"
                            "{\"text\": \"and a third, to fill the rows\"}\n";
  const std::string reordered_lines = lines.substr(lines.find('\n') + 1) + lines.substr(0, lines.find('\n') + 1);
  const std::string data = dir + "/d.jsonl", shards = dir + "/shards";
  const std::string jsonl_spec =
      write_file(dir + "/jsonl.yaml", tiny_spec_yaml(3, "{source: jsonl, path: " + data + ", tokenizer: byte}"));
  const std::string shards_spec =
      write_file(dir + "/shards.yaml", tiny_spec_yaml(3, "{source: shards, path: " + shards + "}"));
  auto write_data = [&](const std::string& text) {
    write_file(data, text);
    fs::remove_all(shards);
    RunResult t = megatrain({"tokenize", data, "--tokenizer", "byte", "--out", shards});
    ASSERT_EQ(t.rc, 0) << describe(t);
  };
  for (const std::string& spec : {jsonl_spec, shards_spec}) {
    write_data(lines);
    const std::string run = dir + "/run-" + fs::path(spec).stem().string();
    RunResult first = megatrain({"train", spec, "--json", "--out", run});
    ASSERT_EQ(first.rc, 0) << describe(first);
    RunResult same = megatrain({"train", spec, "--json", "--out", run});
    EXPECT_EQ(same.err.find("the data is not what"), std::string::npos) << describe(same);
    write_data(reordered_lines);
    RunResult reordered = megatrain({"train", spec, "--json", "--out", run});
    EXPECT_EQ(reordered.rc, 0) << describe(reordered);
    EXPECT_NE(reordered.err.find("the data is not what"), std::string::npos) << spec << ": " << describe(reordered);
  }
}

}  // namespace
}  // namespace mt::cli::testing
