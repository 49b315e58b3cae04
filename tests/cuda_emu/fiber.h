// Execution contexts for the CUDA emulation's fibers (cuda_emu.cc): make one on a stack, jump
// from one to another. On x86-64 a stack pointer and a switch of the six callee-saved registers
// (fiber.cc; ~100x cheaper than swapcontext, which makes a system call for the signal mask on
// every switch); elsewhere ucontext. Under ASan every jump is announced to the sanitizer, so
// it follows the stacks.
#pragma once
#include <ucontext.h>

#include <cstddef>

namespace mt_emu {

struct Context {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  const char* stack = nullptr;  // bottom (lowest address) of the stack this context runs on
  size_t stack_bytes = 0;
};

// A context that starts `entry` (which must never return) on [stack, stack + bytes).
void make_context(Context& c, char* stack, size_t bytes, void (*entry)());
// The calling thread's own stack, for contexts that run on it (the scheduler's).
void this_thread_context(Context& c);
// Saves the current context in `from` and resumes `to`; returns when something jumps back.
void jump(Context& from, Context& to);
// The same from a context that is finished: it is never resumed.
[[noreturn]] void jump_for_good(Context& from, Context& to);
// First thing on a new context's stack (completes the sanitizer's view of the jump into it).
void arrived();

}  // namespace mt_emu
