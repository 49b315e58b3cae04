// The grad window's buffers: a unit keeps the buffer it took until it gives it back; a take with
// every buffer held waits for the next one given back, and gets exactly that one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/optim/grad_window.h"

namespace mt {
namespace {

TEST(GradWindow, ATakeWaitsForTheBufferGivenBack) {
  std::vector<char> region(2 * 64);
  GradWindow w(region.data(), 2, 64, 5);
  void* a = w.take(3);
  void* b = w.take(1);
  EXPECT_NE(a, b);
  EXPECT_EQ(w.take(3), a) << "a unit that holds a buffer keeps it";
  EXPECT_EQ(w.held(3), a);
  EXPECT_EQ(w.held(0), nullptr);
  for (void* p : {a, b})
    EXPECT_TRUE(p == region.data() || p == region.data() + 64);

  std::atomic<bool> got{false};
  void* c = nullptr;
  std::thread taker([&] {
    c = w.take(4);  // both buffers held: waits
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got) << "took a buffer while both were held";
  w.give_back(3);
  taker.join();
  EXPECT_EQ(c, a) << "the buffer unit 3 gave back";
  EXPECT_EQ(w.held(3), nullptr);
  w.give_back(3);  // holds none: nothing happens
  w.give_back(1);
  w.give_back(4);
  EXPECT_NE(w.take(0), nullptr);
  EXPECT_NE(w.take(2), nullptr);
}

}  // namespace
}  // namespace mt
