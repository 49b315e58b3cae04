// See fiber.h.
#include "tests/cuda_emu/fiber.h"

#include <pthread.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define MT_EMU_ASAN 1
#endif

namespace mt_emu {

#if defined(__x86_64__)
extern "C" void mt_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl mt_emu_switch
  .type mt_emu_switch, @function
mt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mt_emu_switch, .-mt_emu_switch
)");

void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  c.stack = stack;
  c.stack_bytes = bytes;
  // mt_emu_switch's frame, popped on the first jump in: MXCSR and the x87 control word, six
  // registers, and `entry` as the return address; after the `ret` the stack pointer is 8 past
  // a 16-byte boundary, as in any function just called.
  auto* top = reinterpret_cast<uint64_t*>(stack + bytes - 64 - 8);
  uint64_t* sp = top - 8;
  uint32_t csr[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
  std::memcpy(&sp[0], csr, 8);
  for (int r = 1; r <= 6; ++r) sp[r] = 0;
  sp[7] = reinterpret_cast<uint64_t>(entry);
  c.sp = sp;
}
static void switch_to(Context& from, Context& to) { mt_emu_switch(&from.sp, to.sp); }
#else
void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  c.stack = stack;
  c.stack_bytes = bytes;
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
static void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

void this_thread_context(Context& c) {
  pthread_attr_t attr;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
  }
  c.stack = static_cast<const char*>(addr);
  c.stack_bytes = size;
}

void jump(Context& from, Context& to) {
#ifdef MT_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, to.stack, to.stack_bytes);
  switch_to(from, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  switch_to(from, to);
#endif
}

void jump_for_good(Context& from, Context& to) {
#ifdef MT_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, to.stack, to.stack_bytes);
#endif
  switch_to(from, to);
  std::abort();
}

void arrived() {
#ifdef MT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

}  // namespace mt_emu
