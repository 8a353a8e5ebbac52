/* text.c — a growable text buffer and the line helpers of the generators (text.h). */
#include "text.h"

#include "files.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory is not a condition the generator can report usefully: it stops. */
void *must_alloc(void *p)
{
    if (!p) {
        fprintf(stderr, "flashlab: out of memory\n");
        abort();
    }
    return p;
}

void buf_add(Buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->text = must_alloc(realloc(b->text, cap)), b->cap = cap;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = '\0';
}

void buf_printf(Buf *b, const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    buf_add(b, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
}

void buf_free(Buf *b)
{
    free(b->text);
    memset(b, 0, sizeof *b);
}

int read_text(const char *path, Buf *b, size_t max_bytes, FlError *err)
{
    FILE *f = fl_open_regular(path, err); /* a regular file only: a FIFO or a folder is refused */
    if (!f)
        return FL_BAD_INPUT;
    char chunk[65536];
    size_t n, total = 0;
    buf_add(b, "", 0);
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && (total += n) <= max_bytes)
        buf_add(b, chunk, n);
    const int failed = ferror(f);
    fclose(f);
    if (total > max_bytes)
        return fl_fail(err, FL_BAD_INPUT, "%s: larger than %zu bytes", path, max_bytes);
    return failed ? fl_fail(err, FL_BAD_INPUT, "%s: cannot read", path) : FL_OK;
}

int write_text(const char *path, const Buf *b, FlError *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot write (%s)", path, strerror(errno));
    int ok = fwrite(b->text, 1, b->len, f) == b->len;
    ok = fclose(f) == 0 && ok;
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "%s: write failed (%s)", path, strerror(errno));
}

/* The next line of text at *pos (without its newline) into *line and *len; 0 at the end. */
int next_line(const char *text, size_t *pos, const char **line, size_t *len)
{
    if (!text || text[*pos] == '\0')
        return 0;
    *line = text + *pos;
    const char *nl = strchr(*line, '\n');
    *len = nl ? (size_t)(nl - *line) : strlen(*line);
    *pos += *len + (nl ? 1 : 0);
    return 1;
}

size_t indent_of(const char *line, size_t len)
{
    size_t n = 0;
    while (n < len && (line[n] == ' ' || line[n] == '\t'))
        n++;
    return n;
}

int is_blank(const char *line, size_t len) { return indent_of(line, len) == len; }

int line_has(const char *line, size_t len, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= len; i++)
        if (!memcmp(line + i, word, w))
            return 1;
    return 0;
}
