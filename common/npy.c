/* npy.c — the one .npy reader and writer of the harness (format versions 1.0, 2.0 and 3.0).
 *
 * A .npy file is: the magic "\x93NUMPY", a major and minor version byte, the header length
 * (2 bytes little-endian in version 1, 4 bytes in versions 2 and 3), then the header: a Python
 * dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and ending in '\n', then the raw data. flashlab accepts little-endian float32 in C order
 * with 0-4 dimensions, and little-endian int32 where the caller asks for it (the block table and
 * sequence lengths of a paged case); everything else is refused with one line naming the file. */
#define _GNU_SOURCE /* mkstemp, fchmod */
#include "npy.h"

#include "files.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
enum {
    NPY_PREFIX_V1 = 10,              /* magic + version + 2-byte length */
    NPY_PREFIX_V2 = 12,              /* magic + version + 4-byte length */
    NPY_MAX_HEADER = 1 << 20,        /* far beyond any real header; guards the allocation */
    NPY_ALIGN = 64                   /* header padding NumPy uses */
};
#define NPY_MAX_DIM ((int64_t)1 << 53) /* no real dimension comes close; keeps products exact */

/* ---- header parsing -------------------------------------------------------------------- */

typedef struct {
    const char *path;
    const char *s;   /* header text, NUL-terminated */
    size_t pos;
    FlError *err;
} HeaderParser;

typedef struct {
    int have_descr, have_fortran, have_shape;
    char descr[64];
    int fortran_order;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
} NpyHeader;

static void skip_space(HeaderParser *hp)
{
    while (hp->s[hp->pos] == ' ' || hp->s[hp->pos] == '\t' || hp->s[hp->pos] == '\n' ||
           hp->s[hp->pos] == '\r')
        hp->pos++;
}

static int expect_char(HeaderParser *hp, char c, const char *what)
{
    skip_space(hp);
    if (hp->s[hp->pos] != c)
        return fl_fail(hp->err, FL_BAD_INPUT, "%s: malformed .npy header: expected %s", hp->path,
                       what);
    hp->pos++;
    return FL_OK;
}

/* A quoted Python string ('...' or "...") into out. */
static int parse_string(HeaderParser *hp, char *out, size_t len, const char *what)
{
    skip_space(hp);
    char quote = hp->s[hp->pos];
    if (quote != '\'' && quote != '"')
        return fl_fail(hp->err, FL_BAD_INPUT, "%s: malformed .npy header: %s is not a string",
                       hp->path, what);
    size_t start = ++hp->pos;
    while (hp->s[hp->pos] && hp->s[hp->pos] != quote)
        hp->pos++;
    if (!hp->s[hp->pos])
        return fl_fail(hp->err, FL_BAD_INPUT, "%s: malformed .npy header: unterminated string",
                       hp->path);
    size_t n = hp->pos - start;
    hp->pos++;
    if (n >= len)
        return fl_fail(hp->err, FL_BAD_INPUT, "%s: malformed .npy header: %s is too long",
                       hp->path, what);
    memcpy(out, hp->s + start, n);
    out[n] = '\0';
    return FL_OK;
}

static int parse_bool(HeaderParser *hp, int *out)
{
    skip_space(hp);
    if (strncmp(hp->s + hp->pos, "True", 4) == 0) {
        *out = 1;
        hp->pos += 4;
    } else if (strncmp(hp->s + hp->pos, "False", 5) == 0) {
        *out = 0;
        hp->pos += 5;
    } else {
        return fl_fail(hp->err, FL_BAD_INPUT,
                       "%s: malformed .npy header: 'fortran_order' is not True or False", hp->path);
    }
    return FL_OK;
}

/* A shape tuple as Python writes it: "()", "(5,)", "(2, 3)", "(2, 3,)"; not "(5)" (a number in
 * parentheses) and no leading zeros ("(005,)" is not a Python literal). */
static int parse_shape(HeaderParser *hp, NpyHeader *h)
{
    int rc = expect_char(hp, '(', "'(' to open 'shape'");
    if (rc)
        return rc;
    h->ndim = 0;
    for (;;) {
        skip_space(hp);
        if (hp->s[hp->pos] == ')') {
            hp->pos++;
            return FL_OK;
        }
        if (!isdigit((unsigned char)hp->s[hp->pos]))
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: malformed .npy header: 'shape' must be a tuple of non-negative "
                           "integers",
                           hp->path);
        if (hp->s[hp->pos] == '0' && isdigit((unsigned char)hp->s[hp->pos + 1]))
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: malformed .npy header: a size in 'shape' has a leading zero", hp->path);
        int64_t dim = 0;
        while (isdigit((unsigned char)hp->s[hp->pos])) {
            dim = dim * 10 + (hp->s[hp->pos++] - '0');
            if (dim > NPY_MAX_DIM)
                return fl_fail(hp->err, FL_BAD_INPUT, "%s: shape dimension too large", hp->path);
        }
        if (h->ndim == TENSOR_MAX_DIMS)
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: array has more than %d dimensions; flashlab supports at most %d",
                           hp->path, TENSOR_MAX_DIMS, TENSOR_MAX_DIMS);
        h->shape[h->ndim++] = dim;
        skip_space(hp);
        if (hp->s[hp->pos] == ',')
            hp->pos++;
        else if (hp->s[hp->pos] != ')')
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: malformed .npy header: expected ',' or ')' in 'shape'", hp->path);
        else if (h->ndim == 1) /* Python reads "(5)" as the number 5, not a tuple: NumPy refuses it */
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: malformed .npy header: a one-dimensional 'shape' needs a comma, as in (5,)",
                           hp->path);
    }
}

static int parse_entry(HeaderParser *hp, NpyHeader *h)
{
    char key[32];
    int rc = parse_string(hp, key, sizeof key, "a key");
    if (!rc)
        rc = expect_char(hp, ':', "':' after a key");
    if (rc)
        return rc;
    if (strcmp(key, "descr") == 0) {
        skip_space(hp);
        if (hp->s[hp->pos] == '[')
            return fl_fail(hp->err, FL_BAD_INPUT,
                           "%s: structured dtype not supported; expected little-endian float32 "
                           "'<f4'",
                           hp->path);
        h->have_descr = 1;
        return parse_string(hp, h->descr, sizeof h->descr, "'descr'");
    }
    if (strcmp(key, "fortran_order") == 0) {
        h->have_fortran = 1;
        return parse_bool(hp, &h->fortran_order);
    }
    if (strcmp(key, "shape") == 0) {
        h->have_shape = 1;
        return parse_shape(hp, h);
    }
    return fl_fail(hp->err, FL_BAD_INPUT, "%s: malformed .npy header: unexpected key '%s'",
                   hp->path, key);
}

static int parse_header(const char *path, const char *text, NpyHeader *h, FlError *err)
{
    HeaderParser hp = {path, text, 0, err};
    memset(h, 0, sizeof *h);
    skip_space(&hp);
    if (text[hp.pos] != '{')
        return fl_fail(err, FL_BAD_INPUT, "%s: malformed .npy header: not a dict", path);
    hp.pos++;
    for (;;) {
        skip_space(&hp);
        if (text[hp.pos] == '}') {
            hp.pos++;
            break;
        }
        int rc = parse_entry(&hp, h);
        if (rc)
            return rc;
        skip_space(&hp);
        if (text[hp.pos] == ',')
            hp.pos++;
        else if (text[hp.pos] != '}')
            return fl_fail(err, FL_BAD_INPUT,
                           "%s: malformed .npy header: expected ',' or '}' after an entry", path);
    }
    skip_space(&hp);
    if (text[hp.pos])
        return fl_fail(err, FL_BAD_INPUT, "%s: malformed .npy header: text after the dict", path);
    if (!h->have_descr || !h->have_fortran || !h->have_shape)
        return fl_fail(err, FL_BAD_INPUT, "%s: malformed .npy header: missing key '%s'", path,
                       !h->have_descr ? "descr" : !h->have_fortran ? "fortran_order" : "shape");
    return FL_OK;
}

/* "little-endian float32 '<f4'" for messages, and the descr NumPy writes. */
static const char *dtype_descr(NpyDtype dtype) { return dtype == NPY_INT32 ? "<i4" : "<f4"; }
static const char *dtype_words(NpyDtype dtype) { return dtype == NPY_INT32 ? "int32" : "float32"; }

static int check_header(const char *path, const NpyHeader *h, NpyDtype dtype, FlError *err)
{
    const char *want = dtype_descr(dtype), *words = dtype_words(dtype);
    if (strcmp(h->descr, want) != 0) {
        if (h->descr[0] == '>' && strcmp(h->descr + 1, want + 1) == 0)
            return fl_fail(err, FL_BAD_INPUT,
                           "%s: big-endian %s '%s' not supported; expected little-endian %s '%s'",
                           path, words, h->descr, words, want);
        return fl_fail(err, FL_BAD_INPUT, "%s: dtype '%s' not supported; expected little-endian %s '%s'",
                       path, h->descr, words, want);
    }
    if (h->fortran_order)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: Fortran order not supported; save a C-contiguous array "
                       "(numpy.ascontiguousarray)",
                       path);
    return FL_OK;
}

/* ---- reading --------------------------------------------------------------------------- */

static uint32_t read_le(const unsigned char *b, int n)
{
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Reads the prefix and header text; on success *text is malloc'ed and *data_offset is set. */
static int read_header_text(const char *path, FILE *f, uint64_t file_size, char **text,
                            uint64_t *data_offset, FlError *err)
{
    unsigned char prefix[NPY_PREFIX_V2];
    size_t got = fread(prefix, 1, NPY_PREFIX_V1, f);
    if (got < sizeof NPY_MAGIC || memcmp(prefix, NPY_MAGIC, sizeof NPY_MAGIC) != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: not a .npy file (bad magic)", path);
    if (got < NPY_PREFIX_V1)
        return fl_fail(err, FL_BAD_INPUT, "%s: truncated header (file is %llu bytes)", path,
                       (unsigned long long)file_size);
    int major = prefix[6], minor = prefix[7];
    if (major < 1 || major > 3 || minor != 0)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: unsupported .npy format version %d.%d (expected 1.0, 2.0 or 3.0)",
                       path, major, minor);
    size_t prefix_len = NPY_PREFIX_V1;
    uint32_t header_len = read_le(prefix + 8, 2);
    if (major >= 2) {
        if (fread(prefix + NPY_PREFIX_V1, 1, 2, f) != 2)
            return fl_fail(err, FL_BAD_INPUT, "%s: truncated header (file is %llu bytes)", path,
                           (unsigned long long)file_size);
        prefix_len = NPY_PREFIX_V2;
        header_len = read_le(prefix + 8, 4);
    }
    if (header_len > NPY_MAX_HEADER)
        return fl_fail(err, FL_BAD_INPUT, "%s: implausible header length %lu", path,
                       (unsigned long)header_len);
    if (file_size < prefix_len + header_len)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: truncated header (declares %lu bytes, file is %llu bytes)", path,
                       (unsigned long)header_len, (unsigned long long)file_size);
    char *buf = malloc((size_t)header_len + 1);
    if (!buf)
        return fl_fail(err, FL_BAD_INPUT, "%s: out of memory reading the header", path);
    if (fread(buf, 1, header_len, f) != header_len) {
        free(buf);
        return fl_fail(err, FL_BAD_INPUT, "%s: truncated header", path);
    }
    buf[header_len] = '\0';
    if (strlen(buf) != header_len) {
        free(buf);
        return fl_fail(err, FL_BAD_INPUT, "%s: malformed .npy header: contains a NUL byte", path);
    }
    *text = buf;
    *data_offset = prefix_len + header_len;
    return FL_OK;
}

/* Bytes the data of shape needs, or -1 when that overflows. */
static int data_bytes_needed(const NpyHeader *h, uint64_t *bytes)
{
    uint64_t n = sizeof(float);
    for (int i = 0; i < h->ndim; i++) {
        uint64_t dim = (uint64_t)h->shape[i];
        if (dim != 0 && n > UINT64_MAX / dim)
            return -1;
        n *= dim;
    }
    if (n > SIZE_MAX)
        return -1;
    *bytes = n;
    return 0;
}

static int read_from_file(const char *path, FILE *f, NpyDtype dtype, Tensor *t, FlError *err)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: %s", path, strerror(errno));
    uint64_t file_size = (uint64_t)st.st_size;

    char *text = NULL;
    uint64_t data_offset = 0;
    int rc = read_header_text(path, f, file_size, &text, &data_offset, err);
    if (rc)
        return rc;
    NpyHeader h;
    rc = parse_header(path, text, &h, err);
    free(text);
    if (!rc)
        rc = check_header(path, &h, dtype, err);
    if (rc)
        return rc;

    Tensor shape_only = {NULL, h.ndim, {0}};
    memcpy(shape_only.shape, h.shape, sizeof h.shape);
    char shape_buf[128];
    tensor_shape_str(&shape_only, shape_buf, sizeof shape_buf);

    uint64_t needed;
    if (data_bytes_needed(&h, &needed) != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: shape %s is too large", path, shape_buf);
    uint64_t held = file_size - data_offset;
    if (held < needed)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: truncated data: holds %llu bytes of data, shape %s needs %llu", path,
                       (unsigned long long)held, shape_buf, (unsigned long long)needed);
    if (held > needed)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: %llu trailing bytes after the data of shape %s", path,
                       (unsigned long long)(held - needed), shape_buf);

    if (tensor_alloc_poisoned(t, h.ndim, h.shape) != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: out of memory for shape %s", path, shape_buf);
    if (needed && fread(t->data, 1, (size_t)needed, f) != (size_t)needed) {
        tensor_free(t);
        return fl_fail(err, FL_BAD_INPUT, "%s: read error: %s", path,
                       ferror(f) ? strerror(errno) : "file shrank while reading");
    }
    return FL_OK;
}

int npy_read_as(const char *path, NpyDtype dtype, Tensor *t, FlError *err)
{
    t->data = NULL;
    t->ndim = 0;
    memset(t->shape, 0, sizeof t->shape);
    FILE *f = fl_open_regular(path, err);
    if (!f)
        return FL_BAD_INPUT;
    int rc = read_from_file(path, f, dtype, t, err);
    fclose(f);
    return rc;
}

int npy_read(const char *path, Tensor *t, FlError *err)
{
    return npy_read_as(path, NPY_FLOAT32, t, err);
}

/* ---- writing --------------------------------------------------------------------------- */

/* The v1.0 header text, padded with spaces so the data starts on a 64-byte boundary. */
static size_t format_header(const Tensor *t, NpyDtype dtype, char *buf, size_t len)
{
    char shape[128];
    tensor_shape_str(t, shape, sizeof shape);
    int n = snprintf(buf, len, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     dtype_descr(dtype), shape);
    size_t used = (size_t)n;
    size_t total = (NPY_PREFIX_V1 + used + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    size_t header_len = total - NPY_PREFIX_V1;
    memset(buf + used, ' ', header_len - 1 - used);
    buf[header_len - 1] = '\n';
    return header_len;
}

static int write_all(FILE *f, const Tensor *t, NpyDtype dtype)
{
    char header[256];
    size_t header_len = format_header(t, dtype, header, sizeof header);
    unsigned char prefix[NPY_PREFIX_V1];
    memcpy(prefix, NPY_MAGIC, sizeof NPY_MAGIC);
    prefix[6] = 1;
    prefix[7] = 0;
    prefix[8] = (unsigned char)(header_len & 0xff);
    prefix[9] = (unsigned char)(header_len >> 8);
    size_t n = tensor_numel(t);
    if (fwrite(prefix, 1, sizeof prefix, f) != sizeof prefix ||
        fwrite(header, 1, header_len, f) != header_len ||
        (n && fwrite(t->data, sizeof(float), n, f) != n))
        return -1;
    return 0;
}

int npy_write_as(const char *path, const Tensor *t, NpyDtype dtype, FlError *err)
{
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot write a tensor of %d dimensions", path,
                       t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return fl_fail(err, FL_BAD_INPUT, "%s: cannot write a negative shape", path);
    if (!t->data && tensor_numel(t) > 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot write a tensor without data", path);

    size_t plen = strlen(path);
    char *tmp = malloc(plen + sizeof ".tmp.XXXXXX");
    if (!tmp)
        return fl_fail(err, FL_BAD_INPUT, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");

    int fd = mkstemp(tmp); /* in the same folder, so rename() is atomic */
    if (fd < 0) {
        int rc = fl_fail(err, FL_BAD_INPUT, "%s: cannot create a temporary file beside it: %s",
                         path, strerror(errno));
        free(tmp);
        return rc;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; data files are normally readable by all */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int rc = fl_fail(err, FL_BAD_INPUT, "%s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    int failed = write_all(f, t, dtype) != 0 || fflush(f) != 0;
    int saved_errno = errno;
    if (fclose(f) != 0 && !failed) {
        failed = 1;
        saved_errno = errno;
    }
    if (!failed && rename(tmp, path) != 0) {
        failed = 1;
        saved_errno = errno;
    }
    if (failed) {
        unlink(tmp);
        free(tmp);
        return fl_fail(err, FL_BAD_INPUT, "%s: write failed: %s", path, strerror(saved_errno));
    }
    free(tmp);
    return FL_OK;
}

int npy_write(const char *path, const Tensor *t, FlError *err)
{
    return npy_write_as(path, t, NPY_FLOAT32, err);
}
