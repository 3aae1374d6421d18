// ProcessDma and ClientMemory against real processes: this test process and
// children it forks (docs/daemon.md §DMA).
#include "firmware-model/daemon/dma.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <doctest/doctest.h>
#include <vector>

#include "firmware-model/daemon/client_memory.h"

namespace metaroce::daemon {
namespace {

std::unique_ptr<ClientMemory> bind(pid_t pid) {
  std::string why;
  auto m = ClientMemory::bind_pid(pid, &why);
  INFO(why);
  REQUIRE(m);
  return m;
}

// A page that nothing maps any more.
uint64_t unmapped_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  munmap(p, 4096);
  return reinterpret_cast<uint64_t>(p);
}

TEST_CASE("flush_owner__a_failed_run_fails_commit_and_the_others_land") {
  auto self = bind(getpid());
  ProcessDma dma([&](fw::OwnerId) { return self.get(); });
  std::vector<uint8_t> a(256, 0), b(256, 0), src(256, 0x5a);
  uint64_t hole = unmapped_page();
  CHECK(dma.write(1, reinterpret_cast<uint64_t>(a.data()), src));
  CHECK(dma.write(1, hole, src));  // queued: the fault shows at commit
  CHECK(dma.write(1, reinterpret_cast<uint64_t>(b.data()), src));
  CHECK_FALSE(dma.commit(1));
  CHECK(a == src);
  CHECK(b == src);
  CHECK(dma.stats().write_faults == 1);
  CHECK(dma.stats().faults == 1);
  CHECK(dma.stats().write_bytes == 512);
  // The failure was reported once; the next batch stands on its own.
  CHECK(dma.write(1, reinterpret_cast<uint64_t>(a.data()), src));
  CHECK(dma.commit(1));
}

// flush() at the end of a loop pass issues writes whose ACK has not been
// sent; a failure there must reach the commit() before that ACK.
TEST_CASE("flush__a_failure_is_kept_for_the_next_commit") {
  auto self = bind(getpid());
  ProcessDma dma([&](fw::OwnerId) { return self.get(); });
  std::vector<uint8_t> src(64, 1), other(64, 0);
  CHECK(dma.write(1, unmapped_page(), src));
  CHECK(dma.write(2, reinterpret_cast<uint64_t>(other.data()), src));
  dma.flush();
  CHECK(other == src);
  CHECK(dma.commit(2));  // another client's failure is not this one's
  CHECK_FALSE(dma.commit(1));
  CHECK(dma.commit(1));
}

TEST_CASE("write__contiguous_pieces_from_separate_sources_are_one_call") {
  auto self = bind(getpid());
  ProcessDma dma([&](fw::OwnerId) { return self.get(); });
  std::vector<uint8_t> mem(3000, 0), x(1000, 1), y(1000, 2), z(1000, 3);
  uint64_t va = reinterpret_cast<uint64_t>(mem.data());
  dma.set_stable_source(x.data(), x.size());  // x in place, y and z staged
  CHECK(dma.write(1, va, x));
  CHECK(dma.write(1, va + 1000, y));
  CHECK(dma.write(1, va + 2000, z));
  dma.set_stable_source(nullptr, 0);
  CHECK(dma.commit(1));
  CHECK(dma.stats().write_calls == 1);
  CHECK(dma.stats().write_segments == 2);  // y and z share one staged piece
  CHECK(std::equal(x.begin(), x.end(), mem.begin()));
  CHECK(std::equal(z.begin(), z.end(), mem.begin() + 2000));
}

// A child that blocks until told, then execs cat (which waits on stdin).
// The pipe to it is close-on-exec: EOF on `execd` means the exec happened.
struct Child {
  pid_t pid = -1;
  int go = -1, execd = -1, cat_stdin = -1;
  uint64_t value_addr = 0;

  Child() {
    int g[2], e[2], c[2];
    REQUIRE(pipe2(g, O_CLOEXEC) == 0);
    REQUIRE(pipe2(e, O_CLOEXEC) == 0);
    REQUIRE(pipe2(c, O_CLOEXEC) == 0);
    static uint64_t value = 0x1122334455667788;
    value_addr = reinterpret_cast<uint64_t>(&value);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      char x;
      if (read(g[0], &x, 1) != 1) _exit(1);
      dup2(c[0], 0);
      execl("/bin/cat", "cat", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(g[0]);
    close(e[1]);
    close(c[0]);
    go = g[1], execd = e[0], cat_stdin = c[1];
  }
  void exec_now() {
    REQUIRE(write(go, "x", 1) == 1);
    char x;
    REQUIRE(read(execd, &x, 1) == 0);  // EOF: the exec closed its end
  }
  ~Child() {
    close(go);
    close(execd);
    close(cat_stdin);  // cat sees EOF and exits
    waitpid(pid, nullptr, 0);
  }
};

TEST_CASE("client_memory__exec_leaves_the_handle_gone_and_the_new_image_untouched") {
  Child child;
  auto mem = bind(child.pid);
  uint64_t got = 0;
  std::span<uint8_t> out(reinterpret_cast<uint8_t*>(&got), sizeof got);
  REQUIRE(mem->read(child.value_addr, out));
  CHECK(got == 0x1122334455667788);
  child.exec_now();
  // The pid still names a live process (the new image), but the handle
  // was bound to the old address space: every copy fails.
  CHECK_FALSE(mem->read(child.value_addr, out));
  CHECK(mem->gone());
  iovec piece{&got, sizeof got};
  CHECK(mem->write(child.value_addr, {&piece, 1}, sizeof got) == 0);
  ProcessDma dma([&](fw::OwnerId) { return mem.get(); });
  std::vector<uint8_t> src(8, 0xee);
  CHECK_FALSE(dma.write(1, child.value_addr, src));  // refused at once, not queued
  CHECK_FALSE(dma.read(1, child.value_addr, out));
  CHECK(dma.stats().gone == 2);
  CHECK(dma.stats().write_calls == 0);
  auto fresh = bind(child.pid);  // what a pid-based copy would reach
  CHECK_FALSE(fresh->gone());
}

TEST_CASE("client_memory__exit_fails_cleanly") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    pause();
    _exit(0);
  }
  auto mem = bind(pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  uint64_t got = 0;
  CHECK_FALSE(mem->read(reinterpret_cast<uint64_t>(&got), {reinterpret_cast<uint8_t*>(&got), 8}));
  CHECK(mem->gone());
}

TEST_CASE("check_range__unmapped_or_without_the_access_asked_for") {
  auto self = bind(getpid());
  std::string why;
  CHECK(self->check_range(unmapped_page(), 4096, false, &why) == EFAULT);
  CHECK(why.find("is not mapped in the client") != std::string::npos);
  auto* ro = static_cast<uint8_t*>(
      mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(ro != MAP_FAILED);
  uint64_t va = reinterpret_cast<uint64_t>(ro);
  CHECK(self->check_range(va, 8192, false, &why) == 0);
  CHECK(self->check_range(va, 8192, true, &why) == EACCES);
  CHECK(why.find("is not writable, and the MR asks for write access") != std::string::npos);
  // Half mapped: the second page unmapped.
  munmap(ro + 4096, 4096);
  CHECK(self->check_range(va, 8192, false, &why) == EFAULT);
  CHECK(why.find("0x" + [&] {
          char b[24];
          std::snprintf(b, sizeof b, "%lx", static_cast<unsigned long>(va + 4096));
          return std::string(b);
        }()) != std::string::npos);
  munmap(ro, 4096);
  CHECK(self->check_range(~0ull - 10, 100, false, &why) == EFAULT);
  CHECK(why.find("wraps around") != std::string::npos);
}

TEST_CASE("check_range__spans_adjacent_mappings") {
  auto self = bind(getpid());
  auto* p = static_cast<uint8_t*>(
      mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(p != MAP_FAILED);
  REQUIRE(mprotect(p + 4096, 4096, PROT_READ | PROT_WRITE | PROT_EXEC) == 0);  // a 2nd VMA
  std::string why;
  CHECK(self->check_range(reinterpret_cast<uint64_t>(p) + 100, 3 * 4096 - 200, true, &why) == 0);
  munmap(p, 3 * 4096);
}

// A child whose page at `addr` is registered with a userfaultfd (kernel
// faults too) that nobody serves. A copy that waited for it would hang this
// test; through ClientMemory it fails at once.
TEST_CASE("client_memory__a_userfaultfd_page_fails_instead_of_blocking") {
  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(done[1]);  // EOF on done[0] when the parent closes its end
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
    uffdio_api api{UFFD_API, 0, 0};
    uffdio_register reg{};
    reg.range = {reinterpret_cast<uint64_t>(p), 4096};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    uint64_t addr = (uffd >= 0 && ioctl(uffd, UFFDIO_API, &api) == 0 &&
                     ioctl(uffd, UFFDIO_REGISTER, &reg) == 0)
                        ? reinterpret_cast<uint64_t>(p)
                        : 0;
    if (write(ready[1], &addr, sizeof addr) != sizeof addr) _exit(1);
    char x;
    if (read(done[0], &x, 1) < 0) _exit(1);
    _exit(0);
  }
  uint64_t addr = 0;
  REQUIRE(read(ready[0], &addr, sizeof addr) == sizeof addr);
  if (addr == 0) {
    MESSAGE("userfaultfd for kernel faults unavailable (needs root or CAP_SYS_PTRACE)");
  } else {
    auto mem = bind(pid);
    uint8_t buf[64];
    CHECK_FALSE(mem->read(addr, buf));
    CHECK_FALSE(mem->gone());  // a fault, not a lost address space
    iovec piece{buf, sizeof buf};
    CHECK(mem->write(addr, {&piece, 1}, sizeof buf) == 0);
  }
  close(done[1]);
  waitpid(pid, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  close(done[0]);
}

// A peer whose credentials changed between connect() and the daemon's
// accept (as after an exec of a setuid program) is refused; an unchanged
// one is bound. The child connects as root, then drops to nobody.
TEST_CASE("bind_peer__refuses_a_peer_whose_credentials_changed_since_connect") {
  int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(l >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "dma_test.%d", getpid());  // abstract
  socklen_t alen = offsetof(sockaddr_un, sun_path) + 1 + std::strlen(a.sun_path + 1);
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), alen) == 0);
  REQUIRE(listen(l, 4) == 0);
  for (bool drop : {false, true}) {
    int sync[2];
    REQUIRE(pipe(sync) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(sync[0]);
      int c = socket(AF_UNIX, SOCK_SEQPACKET, 0);
      if (connect(c, reinterpret_cast<sockaddr*>(&a), alen) != 0) _exit(1);
      char ok = !drop || (setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0);
      if (write(sync[1], &ok, 1) != 1) _exit(1);
      pause();
      _exit(0);
    }
    close(sync[1]);
    char ok = 0;
    REQUIRE(read(sync[0], &ok, 1) == 1);
    int s = accept(l, nullptr, nullptr);
    REQUIRE(s >= 0);
    std::string why;
    auto m = ClientMemory::bind_peer(s, &why);
    if (!ok) {
      MESSAGE("cannot change credentials here (needs root): bind_peer's refusal not checked");
    } else if (drop) {
      CHECK_FALSE(m);
      CHECK(why.find("changed credentials since connect") != std::string::npos);
    } else {
      INFO(why);
      CHECK(m);
      if (m) CHECK(m->pid() == pid);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(s);
    close(sync[0]);
  }
  close(l);
}

}  // namespace
}  // namespace metaroce::daemon
