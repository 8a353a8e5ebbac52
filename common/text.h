/* text.h — a growable text buffer, whole-file reads and writes, and the line helpers that the
 * generators (the student copy of common/exercise*.c) use. Out of memory aborts with one line. */
#ifndef FLASHLAB_TEXT_H
#define FLASHLAB_TEXT_H

#include <stddef.h>

#include "error.h"

typedef struct {
    char *text; /* NUL-terminated once anything was added */
    size_t len, cap;
} Buf;

/* p, or when p is NULL (an allocation failed) one line on stderr and abort: out of memory is not a
 * condition a generator can report usefully. */
void *must_alloc(void *p);

void buf_add(Buf *b, const char *s, size_t n);
void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(Buf *b);
/* The whole file at path (a regular file, at most max_bytes; TEXT_ANY_SIZE for no limit) appended
 * to b; FL_BAD_INPUT with a message when it cannot be read or is larger. */
#define TEXT_ANY_SIZE ((size_t)-1)
int read_text(const char *path, Buf *b, size_t max_bytes, FlError *err);
/* b written to path (created or replaced); FL_BAD_INPUT with a message on failure. */
int write_text(const char *path, const Buf *b, FlError *err);

/* The next line of text at *pos (without its newline) into *line and *len; 0 at the end. */
int next_line(const char *text, size_t *pos, const char **line, size_t *len);
/* Leading spaces and tabs of a line. */
size_t indent_of(const char *line, size_t len);
int is_blank(const char *line, size_t len);
/* Whether word occurs in the line. */
int line_has(const char *line, size_t len, const char *word);

#endif
