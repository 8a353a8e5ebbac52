/* sanitizer_options.c — the sanitizers' default settings, compiled into every executable of a
 * sanitized build (FLASHLAB_SANITIZE; the root CMakeLists.txt links it in) and into no other.
 *
 * ASan, UBSan and LeakSanitizer call these functions when the process starts; ASAN_OPTIONS,
 * UBSAN_OPTIONS and LSAN_OPTIONS from the environment are read after them and still win.
 *
 * exitcode=86: a sanitizer report ends the process with 86, a status of its own. Left at the
 * sanitizers' default of 1, a heap overflow or a signed overflow in the flashlab tool would look
 * like "a check failed" (1), and a test that expects exit 2 or 3 could not tell a crash from a
 * refusal (README.md, "Exit codes"). tests/sanitizer_exit.cmake checks that UBSan and LSan reports
 * end with 86; CMakePresets.json's sanitize test preset names the same code.
 * halt_on_error=1: the first report ends the run. print_stacktrace=1: UBSan shows where. */

const char *__asan_default_options(void);
const char *__ubsan_default_options(void);
const char *__lsan_default_options(void);

const char *__asan_default_options(void) { return "exitcode=86:halt_on_error=1"; }

const char *__ubsan_default_options(void) { return "exitcode=86:halt_on_error=1:print_stacktrace=1"; }

const char *__lsan_default_options(void) { return "exitcode=86"; }
