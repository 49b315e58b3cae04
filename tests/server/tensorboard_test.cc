// logging.tensorboard through the daemon: a job submitted over gRPC writes its TensorBoard
// event file under STATE_DIR/jobs/ID/tensorboard, GetJob names that directory, and the file
// holds each step once with the daemon's own numbers (the loss GetJob reports for the last).
#include "engine/io/tensorboard.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

TEST(ServerTensorBoard, AJobsCurvesAreInItsDirectoryAndNamedByGetJob) {
  const std::string state = fresh_dir("tensorboard");
  Server s(test_config(state));
  ASSERT_TRUE(s.stub);
  v1::JobSpec spec = tiny_spec(3);
  spec.mutable_logging()->set_tensorboard(true);
  const std::string id = submit(*s.stub, spec);
  const v1::Job done = wait_terminal(*s.stub, id);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.tensorboard_dir(), state + "/jobs/" + id + "/tensorboard");
  auto f = read_tensorboard_file(done.tensorboard_dir() + "/" + kTensorBoardFile);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->events.size(), 4u) << "the version record, then steps 1..3";
  for (long step = 1; step <= 3; ++step) EXPECT_EQ(f->events[size_t(step)].step, step);
  const auto& last = f->events.back().scalars;
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(last.front().first, "train/loss");
  EXPECT_EQ(last.front().second, double(float(done.loss())));

  const std::string plain = submit(*s.stub, tiny_spec(1));  // without logging: no directory, none named
  const v1::Job other = wait_terminal(*s.stub, plain);
  EXPECT_TRUE(other.tensorboard_dir().empty());
  EXPECT_FALSE(std::filesystem::exists(state + "/jobs/" + plain + "/tensorboard"));
}

}  // namespace
}  // namespace mt::server::testing
