/* error.c — fl_fail and fl_warn. Every message is one printable line: bytes that came from a file
 * (a header key, a dtype) may hold a newline or a terminal escape, so control characters are
 * written as \xNN before the message reaches err->msg or stderr. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Formats fmt into out (size len), then rewrites every control byte (< 0x20, 0x7f) as \xNN, cut
 * short if the escapes do not fit. */
static void format_one_line(char *out, size_t len, const char *fmt, va_list ap)
{
    char raw[1024];
    vsnprintf(raw, sizeof raw, fmt, ap);
    size_t n = 0;
    for (const unsigned char *s = (const unsigned char *)raw; *s && n + 1 < len; s++) {
        if (*s >= 0x20 && *s != 0x7f) {
            out[n++] = (char)*s;
        } else if (n + 5 < len) {
            snprintf(out + n, 5, "\\x%02x", *s);
            n += 4;
        } else {
            break;
        }
    }
    out[n] = '\0';
}

int fl_fail(FlError *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        format_one_line(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void fl_warn(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    format_one_line(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flashlab: warning: %s\n", line);
}
