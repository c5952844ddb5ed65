// gtest's main plus a crash report: a test binary that dies of a signal prints which test was running and a
// backtrace before it dies, so a crash seen only on a CI machine names its test in the log.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace {

void writeStderr(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

extern "C" void reportCrash(int sig) {
  writeStderr("\n*** collbench test binary: fatal signal ");
  writeStderr(sigdescr_np(sig) ? sigdescr_np(sig) : "?");
  // Not async-signal-safe, but the process is about to die and the name is the point of the report.
  if (const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info()) {
    writeStderr(" in ");
    writeStderr(t->test_suite_name());
    writeStderr(".");
    writeStderr(t->name());
  }
  writeStderr("\n");
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The handler runs on its own stack so that a stack overflow is reported too.
  static char altStack[1 << 16];
  stack_t ss{};
  ss.ss_sp = altStack;
  ss.ss_size = sizeof altStack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = reportCrash;
  sa.sa_flags = SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  return RUN_ALL_TESTS();
}
