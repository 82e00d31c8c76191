// test_preload_cxx.cc: C++ operator new/delete under LD_PRELOAD=libstrata.so: every variant
// reaches Strata, over-aligned types are aligned, a failed new throws std::bad_alloc (after
// calling the new_handler), and nothrow new returns nullptr.
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <vector>

static int passed, failed;
#define CHECK(c) ((c) ? passed++ : (failed++, std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c)))

struct alignas(256) Wide { char x[300]; };
static int handler_calls;

int main() {
  auto owns = reinterpret_cast<int (*)(const void *)>(dlsym(RTLD_DEFAULT, "strata_owns"));
  CHECK(owns != nullptr);
  if (!owns) return 1;
  int *i = new int(5);
  CHECK(owns(i) && *i == 5);
  delete i;
  int *arr = new int[1000]();
  CHECK(owns(arr) && arr[999] == 0);
  delete[] arr;
  Wide *w = new Wide;
  CHECK(owns(w) && reinterpret_cast<std::uintptr_t>(w) % 256 == 0);
  delete w;
  Wide *wa = new Wide[7];
  CHECK(reinterpret_cast<std::uintptr_t>(wa) % 256 == 0);
  delete[] wa;
  Wide *wn = new (std::nothrow) Wide;
  CHECK(wn && reinterpret_cast<std::uintptr_t>(wn) % 256 == 0);
  delete wn;
  std::vector<std::string> v;
  for (int k = 0; k < 10000; k++) v.push_back(std::string(k % 100, 'x'));
  CHECK(v[9999].size() == 99 && owns(v.data()));
  auto sp = std::make_shared<std::vector<int>>(100000, 7);
  CHECK((*sp)[99999] == 7);
  const std::size_t huge = std::size_t(1) << 50;
  char *nt = new (std::nothrow) char[huge];
  CHECK(nt == nullptr);
  bool threw = false;
  try {
    char *big = new char[huge];
    delete[] big;
  } catch (const std::bad_alloc &e) {
    threw = std::string(e.what()).size() > 0;
  }
  CHECK(threw);
  std::set_new_handler([] {
    handler_calls++;
    std::set_new_handler(nullptr); // next failure throws
  });
  threw = false;
  try {
    char *big = new char[huge];
    delete[] big;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw && handler_calls == 1);
  std::printf("test_preload_cxx: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
