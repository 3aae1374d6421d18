// hostile_client_ptracer: opens a MetaRoCE device through libibverbs and
// the provider, and fails if the provider lowered this process's ptrace
// protection (prctl(PR_SET_PTRACER, ...)): every RDMA application would
// become traceable by any process of its user under Yama ptrace_scope 1.
//
// This kernel may have no Yama: the program interposes fopen() so the
// provider sees "ptrace_scope 1" (what it checked before calling prctl),
// and interposes prctl() to record the call. Exit 0: no PR_SET_PTRACER
// and the device opened; 1 otherwise.
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

static int g_set_ptracer_calls = 0;

extern "C" int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a[4];
  for (auto& v : a) v = va_arg(ap, unsigned long);
  va_end(ap);
  if (option == PR_SET_PTRACER) {
    g_set_ptracer_calls++;
    return 0;  // recorded, not done
  }
  using Fn = int (*)(int, unsigned long, unsigned long, unsigned long, unsigned long);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "prctl"));
  return real(option, a[0], a[1], a[2], a[3]);
}

extern "C" FILE* fopen(const char* path, const char* mode) {
  if (path && strcmp(path, "/proc/sys/kernel/yama/ptrace_scope") == 0) {
    static char scope[] = "1\n";
    return fmemopen(scope, 2, "r");
  }
  using Fn = FILE* (*)(const char*, const char*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "fopen"));
  return real(path, mode);
}

int main(int argc, char** argv) {
  const char* want = argc > 1 ? argv[1] : "metaroce0";
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), want) == 0) ctx = ibv_open_device(list[i]);
  if (!ctx) {
    fprintf(stderr, "FAIL cannot open %s\n", want);
    return 1;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  bool ok = pd != nullptr && g_set_ptracer_calls == 0;
  printf("%s opened %s; PR_SET_PTRACER calls: %d\n", ok ? "ok" : "FAIL", want, g_set_ptracer_calls);
  if (pd) ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return ok ? 0 : 1;
}
