/* error.h — exit codes and the one error type every harness function reports through.
 *
 * Functions that can fail return an int status (FL_OK on success) and, on failure, fill an FlError
 * with one human-readable line that names the file and what is wrong. Nothing in common/ calls
 * exit(): only the flashlab tool turns a status into an exit code. */
#ifndef FLASHLAB_ERROR_H
#define FLASHLAB_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Exit codes (the table in README.md, "The flashlab tool"). */
enum {
    FL_OK = 0,
    FL_CHECK_FAILED = 1, /* outputs differ from the golden files */
    FL_BAD_INPUT = 2,    /* bad usage or bad input: message names the file and the problem */
    FL_UNSUPPORTED = 3,  /* the stage lacks a feature the case asks for */
    FL_NO_DEVICE = 77    /* no CUDA device: CTest's skip code */
};

typedef struct {
    char msg[1024];
} FlError;

/* Format msg into err (if err is non-NULL) and return code. Usage: return fl_fail(err, FL_BAD_INPUT, "...", ...);
 * The message is always one printable line: control bytes (a newline or an escape copied from a
 * file) are written as \xNN. */
int fl_fail(FlError *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* One line "flashlab: warning: ..." on stderr, escaped like fl_fail (a NaN in an input file, a
 * non-finite output from finite inputs). */
void fl_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
