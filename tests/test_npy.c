/* test_npy.c — the .npy reader and writer: round trips, every malformed file the reader must
 * refuse (with a message naming the file), and the atomic writer. Fixtures are written into a
 * fresh temporary folder; nothing binary is committed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "test_support.h"

static char tmpdir[256];

static const char *fixture(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

/* Writes a .npy file by hand: magic, version major.0, the header (padded to 64 bytes and ended
 * with '\n' when pad is set), then nbytes of data. */
static void write_raw(const char *name, int major, const char *header, int pad, size_t nbytes)
{
    FILE *f = fopen(fixture(name), "wb");
    if (!f) {
        perror(name);
        exit(2);
    }
    size_t prefix = major == 1 ? 10 : 12;
    size_t len = strlen(header);
    size_t header_len = pad ? ((prefix + len + 1 + 63) / 64 * 64 - prefix) : len;
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(major, f);
    fputc(0, f);
    for (size_t i = 0; i < prefix - 8; i++)
        fputc((int)((header_len >> (8 * i)) & 0xff), f);
    fwrite(header, 1, len, f);
    for (size_t i = len; pad && i + 1 < header_len; i++)
        fputc(' ', f);
    if (pad)
        fputc('\n', f);
    for (size_t i = 0; i < nbytes; i++)
        fputc((int)(i & 0x7f), f);
    fclose(f);
}

/* npy_read must refuse name with FL_BAD_INPUT, name the file, and say phrase. */
static void expect_refused(const char *name, const char *phrase, int line)
{
    Tensor t = {(float *)&t, 0, {0}}; /* garbage in: must come back NULL */
    FlError err = {{0}};
    int rc = npy_read(fixture(name), &t, &err);
    if (rc != FL_BAD_INPUT || t.data != NULL || !strstr(err.msg, fixture(name)) ||
        !strstr(err.msg, phrase)) {
        test_fail(__FILE__, line, "%s: rc %d, message \"%s\", wanted the path and \"%s\"", name, rc,
                  err.msg, phrase);
    }
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_round_trip(void)
{
    int64_t shape[4] = {2, 3, 4, 5};
    Tensor t;
    EXPECT(tensor_alloc_poisoned(&t, 4, shape) == 0);
    for (size_t i = 0; i < tensor_numel(&t); i++)
        t.data[i] = (float)i * 0.37f - 11.0f;
    FlError err = {{0}};
    EXPECT(npy_write(fixture("rt.npy"), &t, &err) == FL_OK);

    Tensor back;
    EXPECT(npy_read(fixture("rt.npy"), &back, &err) == FL_OK);
    EXPECT(back.ndim == 4);
    EXPECT(memcmp(back.shape, shape, sizeof shape) == 0);
    EXPECT(back.data && memcmp(back.data, t.data, tensor_bytes(&t)) == 0);

    /* header padded so the data starts on a 64-byte boundary, and ends in '\n' */
    struct stat st;
    EXPECT(stat(fixture("rt.npy"), &st) == 0);
    size_t header_end = (size_t)st.st_size - tensor_bytes(&t);
    EXPECT(header_end % 64 == 0);
    FILE *f = fopen(fixture("rt.npy"), "rb");
    char text[256] = {0};
    EXPECT(f && fread(text, 1, sizeof text - 1, f) > 0);
    if (f)
        fclose(f);
    EXPECT(text[header_end - 1] == '\n');
    EXPECT(strstr(text + 10, "'descr': '<f4'") && strstr(text + 10, "'shape': (2, 3, 4, 5)"));
    EXPECT(count_entries(tmpdir) == 1); /* no temporary file left beside it */
    tensor_free(&t);
    tensor_free(&back);

    /* 1-d and 0-d tensors keep their shape */
    int64_t five = 5;
    EXPECT(tensor_alloc_poisoned(&t, 1, &five) == 0);
    for (int i = 0; i < 5; i++)
        t.data[i] = (float)i;
    EXPECT(npy_write(fixture("one.npy"), &t, &err) == FL_OK);
    EXPECT(npy_read(fixture("one.npy"), &back, &err) == FL_OK);
    EXPECT(back.ndim == 1 && back.shape[0] == 5 && back.data[4] == 4.0f);
    char buf[32];
    EXPECT(strcmp(tensor_shape_str(&back, buf, sizeof buf), "(5,)") == 0);
    tensor_free(&t);
    tensor_free(&back);

    EXPECT(tensor_alloc_poisoned(&t, 0, NULL) == 0);
    t.data[0] = 42.0f;
    EXPECT(npy_write(fixture("zero.npy"), &t, &err) == FL_OK);
    EXPECT(npy_read(fixture("zero.npy"), &back, &err) == FL_OK);
    EXPECT(back.ndim == 0 && back.data && back.data[0] == 42.0f);
    tensor_free(&t);
    tensor_free(&back);
}

/* Headers written the other ways NumPy (or a person) may write them. */
static void test_header_variants(void)
{
    FlError err = {{0}};
    Tensor t;
    write_raw("v2.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 24);
    EXPECT(npy_read(fixture("v2.npy"), &t, &err) == FL_OK);
    EXPECT(t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3);
    tensor_free(&t);

    write_raw("v3.npy", 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 1, 12);
    EXPECT(npy_read(fixture("v3.npy"), &t, &err) == FL_OK);
    EXPECT(t.ndim == 1 && t.shape[0] == 3);
    tensor_free(&t);

    write_raw("order.npy", 1, "{\"shape\":(4 ,2,),\"fortran_order\" :False,  'descr':'<f4'}", 1,
              32);
    EXPECT(npy_read(fixture("order.npy"), &t, &err) == FL_OK);
    EXPECT(t.ndim == 2 && t.shape[0] == 4 && t.shape[1] == 2);
    tensor_free(&t);

    write_raw("empty.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 1, 0);
    EXPECT(npy_read(fixture("empty.npy"), &t, &err) == FL_OK);
    EXPECT(t.ndim == 2 && t.shape[0] == 0 && tensor_numel(&t) == 0);
    tensor_free(&t);
}

static void test_malformed(void)
{
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    write_raw("trunc_header.npy", 1, good, 1, 0);
    FILE *f = fopen(fixture("trunc_header.npy"), "r+b");
    if (f) {
        fflush(f);
        EXPECT(ftruncate(fileno(f), 30) == 0);
        fclose(f);
    }
    expect_refused("trunc_header.npy", "truncated header", __LINE__);

    write_raw("short.npy", 1, good, 1, 20);
    expect_refused("short.npy", "holds 20 bytes of data, shape (2, 3) needs 24", __LINE__);

    write_raw("f8.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 1, 48);
    expect_refused("f8.npy", "'<f8'", __LINE__);
    expect_refused("f8.npy", "expected little-endian float32 '<f4'", __LINE__);

    write_raw("be.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 24);
    expect_refused("be.npy", "big-endian", __LINE__);

    write_raw("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1,
              24);
    expect_refused("fortran.npy", "Fortran order", __LINE__);

    f = fopen(fixture("magic.npy"), "wb");
    if (f) {
        fputs("PK\x03\x04 this is a zip file, not an array", f);
        fclose(f);
    }
    expect_refused("magic.npy", "bad magic", __LINE__);

    write_raw("five.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 2), }",
              1, 8);
    expect_refused("five.npy", "more than 4 dimensions", __LINE__);

    write_raw("trailing.npy", 1, good, 1, 28);
    expect_refused("trailing.npy", "4 trailing bytes", __LINE__);

    expect_refused("missing.npy", "No such file or directory", __LINE__);

    write_raw("version.npy", 4, good, 1, 24);
    expect_refused("version.npy", "unsupported .npy format version 4.0", __LINE__);

    write_raw("nokey.npy", 1, "{'descr': '<f4', 'fortran_order': False, }", 1, 4);
    expect_refused("nokey.npy", "missing key 'shape'", __LINE__);

    write_raw("list.npy", 1, "['descr', '<f4']", 1, 4);
    expect_refused("list.npy", "not a dict", __LINE__);

    write_raw("negative.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 1,
              24);
    expect_refused("negative.npy", "non-negative", __LINE__);

    /* shape whose byte count overflows 64 bits: refused, no giant allocation */
    write_raw("huge.npy", 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 1,
              8);
    expect_refused("huge.npy", "too large", __LINE__);

    /* header length that runs past the end of the file */
    f = fopen(fixture("long_header.npy"), "wb");
    if (f) {
        fwrite("\x93NUMPY\x01\x00\xff\x7f{'descr'", 1, 17, f);
        fclose(f);
    }
    expect_refused("long_header.npy", "truncated header", __LINE__);
}

/* int32 is read only when asked for (a paged case's block table and sequence lengths), and a
 * float32 file is refused there just as an int32 file is refused where float32 is expected. */
static void test_int32(void)
{
    static const unsigned char values[12] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0};
    write_raw("i4.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 1, 0);
    FILE *f = fopen(fixture("i4.npy"), "ab");
    if (f) {
        fwrite(values, 1, sizeof values, f);
        fclose(f);
    }
    Tensor t;
    FlError err = {{0}};
    EXPECT(npy_read_as(fixture("i4.npy"), NPY_INT32, &t, &err) == FL_OK);
    EXPECT(t.ndim == 1 && t.shape[0] == 3);
    if (t.data) {
        const int32_t *x = tensor_int32(&t);
        EXPECT(x[0] == 5 && x[1] == -1 && x[2] == 256);
    }
    tensor_free(&t);
    expect_refused("i4.npy", "expected little-endian float32 '<f4'", __LINE__);

    write_raw("f4.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 1, 12);
    EXPECT(npy_read_as(fixture("f4.npy"), NPY_INT32, &t, &err) == FL_BAD_INPUT && t.data == NULL);
    EXPECT(strstr(err.msg, "expected little-endian int32 '<i4'") != NULL);
    write_raw("i4be.npy", 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", 1, 12);
    EXPECT(npy_read_as(fixture("i4be.npy"), NPY_INT32, &t, &err) == FL_BAD_INPUT);
    EXPECT(strstr(err.msg, "big-endian int32") != NULL);
    write_raw("i8.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 1, 24);
    EXPECT(npy_read_as(fixture("i8.npy"), NPY_INT32, &t, &err) == FL_BAD_INPUT);
    EXPECT(strstr(err.msg, "'<i8'") != NULL);
}

static void test_write_failures(void)
{
    char missing_dir[512], path[600];
    snprintf(missing_dir, sizeof missing_dir, "%s/no_such_folder", tmpdir);
    snprintf(path, sizeof path, "%s/o.npy", missing_dir);
    int64_t shape[2] = {2, 2};
    Tensor t;
    EXPECT(tensor_alloc_poisoned(&t, 2, shape) == 0);
    int before = count_entries(tmpdir);
    FlError err = {{0}};
    EXPECT(npy_write(path, &t, &err) == FL_BAD_INPUT);
    EXPECT(strstr(err.msg, path) != NULL);
    EXPECT(access(missing_dir, F_OK) != 0);
    EXPECT(count_entries(tmpdir) == before);

    /* a folder in the way of the target: the rename fails and the temporary file is removed */
    EXPECT(mkdir(fixture("occupied.npy"), 0755) == 0);
    EXPECT(mkdir(fixture("occupied.npy/x"), 0755) == 0);
    before = count_entries(tmpdir);
    EXPECT(npy_write(fixture("occupied.npy"), &t, &err) == FL_BAD_INPUT);
    EXPECT(strstr(err.msg, fixture("occupied.npy")) != NULL);
    EXPECT(count_entries(tmpdir) == before);
    tensor_free(&t);
}

int main(void)
{
    if (test_tmpdir_make(tmpdir, sizeof tmpdir, "test_npy") != 0)
        return 2;
    test_round_trip();
    test_header_variants();
    test_malformed();
    test_int32();
    test_write_failures();
    test_tmpdir_remove(tmpdir);
    return test_exit_code("test_npy");
}
