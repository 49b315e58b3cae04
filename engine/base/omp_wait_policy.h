// OpenMP's wait policy for our binaries. libgomp's default lets an idle worker spin ~3 ms after
// every parallel region; on a node shared with other work (a second job, a compiler, another
// OpenMP process) a thread then spins through its time slice while the thread it waits for is
// descheduled, and tiny steps ran 30x slower (docs/PERF.md). Passive waiting (sleep on a futex)
// costs little on an idle machine, so it is our default.
#pragma once

namespace mt {

// Call first in main(). libgomp reads OMP_WAIT_POLICY once, when it is loaded — before main —
// so when the variable is unset this sets it to `passive` and re-executes the program (same
// pid, same arguments). An explicit OMP_WAIT_POLICY is respected, and so is
// MEGATRAIN_OMP_WAIT_POLICY=keep (libgomp's own default, for measuring it). Returns normally
// when nothing needs doing or the re-exec is impossible (the program then runs as it is).
void use_passive_omp_wait_policy(char** argv);

}  // namespace mt
