// main() for a libFuzzer target built without -fsanitize=fuzzer: replays
// the files named on the command line through LLVMFuzzerTestOneInput, so a
// crash libFuzzer found can be debugged with GCC and Bazel. Exits 0 if none
// aborts, 2 if a file cannot be read.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  const char* name = std::strrchr(argv[0], '/') ? std::strrchr(argv[0], '/') + 1 : argv[0];
  for (int i = 1; i < argc; ++i) {
    std::FILE* f = std::fopen(argv[i], "rb");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: cannot open %s\n", name, argv[i]);
      return 2;
    }
    std::vector<uint8_t> buf;
    for (int c; (c = std::fgetc(f)) != EOF;) buf.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("%s: replayed %d inputs, no failure\n", name, argc - 1);
  return 0;
}
