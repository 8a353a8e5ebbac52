/* test_hostile.c — hostile case folders, built here at test time, against the flashlab tool.
 *
 *   test_hostile FLASHLAB GOLDEN_DIR ITEM
 *
 * Each ITEM is one finding of a fuzzing session (tests/hostile.cmake registers one CTest test per
 * item): the tool must refuse the folder with exit 2 and exactly one printable line on stderr, or
 * compute the right answer; it must never crash, hang, overwrite a case or write half a result.
 * The tool runs in a child process under a 60 s alarm, so a hang fails instead of blocking. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npy.h"
#include "test_support.h"

static const char *flashlab, *golden;
static char work[512];

/* ---- files ------------------------------------------------------------------------------------- */

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n)
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (f)
        fclose(f);
}

static char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *n = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size >= 0 && (buf = malloc((size_t)size + 1)) != NULL)
        *n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if (buf)
        buf[*n] = '\0';
    return buf;
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    write_bytes(path, text, strlen(text));
}

/* WORK/<name>_<n>, a fresh folder (n counts calls) holding a copy of every file of the golden
 * case `name`. */
static const char *copy_case(const char *name, char *dir, size_t len)
{
    static int copies;
    char source[1024];
    snprintf(dir, len, "%s/%s_%d", work, name, copies++);
    snprintf(source, sizeof source, "%s/%s", golden, name);
    DIR *d = opendir(source);
    if (!d || mkdir(dir, 0777) != 0) {
        test_fail(__FILE__, __LINE__, "copy of %s: %s", source, strerror(errno));
        if (d)
            closedir(d);
        return dir;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char from[1400], to[1400];
        size_t n;
        snprintf(from, sizeof from, "%s/%s", source, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        char *data = read_bytes(from, &n);
        if (data)
            write_bytes(to, data, n);
        free(data);
    }
    closedir(d);
    return dir;
}

/* A float32 (or int32) tensor file of the given shape, every element `fill`. */
static void write_filled(const char *dir, const char *file, NpyDtype dtype, int ndim, const int64_t *shape,
                         double fill)
{
    char path[1024];
    Tensor t;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (tensor_alloc_poisoned(&t, ndim, shape) != 0) {
        test_fail(__FILE__, __LINE__, "out of memory for %s", path);
        return;
    }
    for (size_t i = 0; i < tensor_numel(&t); i++) {
        if (dtype == NPY_INT32)
            ((int32_t *)(void *)t.data)[i] = (int32_t)fill;
        else
            t.data[i] = (float)fill;
    }
    FlError err;
    if (npy_write_as(path, &t, dtype, &err) != FL_OK)
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    tensor_free(&t);
}

/* Multiplies every element of dir/file by factor (in float64, stored as float32). */
static void scale_file(const char *dir, const char *file, double factor)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    Tensor t;
    FlError err;
    if (npy_read(path, &t, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    for (size_t i = 0; i < tensor_numel(&t); i++)
        t.data[i] = (float)(t.data[i] * factor);
    if (npy_write_as(path, &t, NPY_FLOAT32, &err) != FL_OK)
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    tensor_free(&t);
}

/* ---- running the tool ---------------------------------------------------------------------------- */

typedef struct {
    int code;        /* exit status, or 128 + signal */
    long peak_kib;   /* the child's peak resident memory */
    char err[8192];  /* what it wrote on stderr */
} Outcome;

/* Runs flashlab with args (NULL-terminated, without argv[0]). */
static Outcome run_tool(const char *const *args)
{
    Outcome r = {0};
    char err_path[600];
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", work);
    const char *argv[16] = {flashlab};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), null = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        dup2(null, 1);
        alarm(60); /* survives exec: a hang ends as SIGALRM */
        execv(flashlab, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    struct rusage usage = {0};
    wait4(pid, &status, 0, &usage);
    r.peak_kib = usage.ru_maxrss;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    size_t n;
    char *text = read_bytes(err_path, &n);
    if (text)
        snprintf(r.err, sizeof r.err, "%s", text);
    free(text);
    return r;
}

/* Exactly one line, printable, ending in '\n'. */
static int one_clean_line(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || s[n - 1] != '\n')
        return 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* The tool refuses: exit 2, one clean line on stderr that contains `names`. */
#define EXPECT_REFUSED(r, names)                                                                     \
    do {                                                                                             \
        if ((r).code != 2 || !one_clean_line((r).err) || !strstr((r).err, names))                    \
            test_fail(__FILE__, __LINE__, "expected exit 2 and one line naming '%s'; got exit %d: %s", \
                      names, (r).code, (r).err);                                                     \
    } while (0)

#define EXPECT_EXIT(r, want)                                                                         \
    do {                                                                                             \
        if ((r).code != (want))                                                                      \
            test_fail(__FILE__, __LINE__, "expected exit %d, got %d: %s", want, (r).code, (r).err);   \
    } while (0)

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- the items ------------------------------------------------------------------------------------- */

/* 1. A sequence length near INT_MAX once overflowed the block-table check: stage 11 read page
 * 1000000 and crashed. Also a valid table with such a length: refused on its size, not run. */
static void paged_seq_len(void)
{
    char dir[600], out[700];
    snprintf(dir, sizeof dir, "%s/paged", work);
    snprintf(out, sizeof out, "%s/out", work);
    mkdir(dir, 0777);
    const int64_t q[4] = {1, 1, 1, 1}, pages[4] = {1, 65536, 1, 1}, table[2] = {1, 32768}, lens[1] = {1};
    write_filled(dir, "q.npy", NPY_FLOAT32, 4, q, 1.0);
    write_filled(dir, "k_pages.npy", NPY_FLOAT32, 4, pages, 0.5);
    write_filled(dir, "v_pages.npy", NPY_FLOAT32, 4, pages, 0.5);
    write_filled(dir, "seq_lens.npy", NPY_INT32, 1, lens, INT_MAX);
    write_filled(dir, "block_table.npy", NPY_INT32, 2, table, 1000000);
    const char *args[] = {"run", "11", dir, "--out", out, NULL};
    Outcome r = run_tool(args);
    EXPECT_REFUSED(r, "block_table.npy");
    write_filled(dir, "block_table.npy", NPY_INT32, 2, table, 0);
    r = run_tool(args);
    EXPECT_REFUSED(r, "Tk");
    EXPECT(!exists(out));
}

/* 2. A window or sink-token count near INT_MAX means "every key up to the row's position": the
 * golden causal case's expected outputs hold, forward and backward, default and naive variant. */
static void huge_window(void)
{
    static const char *const options[] = {"{\"causal\": true, \"window\": 2147483647}",
                                          "{\"causal\": true, \"window\": 4, \"sink_tokens\": 2147483647}"};
    char dir[600];
    for (int i = 0; i < 2; i++) {
        copy_case("causal_t37_d80", dir, sizeof dir);
        write_text(dir, "case.json", options[i]);
        for (int naive = 0; naive < 2; naive++) {
            const char *args[] = {"check", "10", dir, naive ? "--variant" : NULL, "naive", NULL};
            Outcome r = run_tool(args);
            EXPECT_EXIT(r, 0);
        }
    }
}

/* 4. A scale that overflows the scores: refused, as are finite inputs that do the same. */
static void huge_scale(void)
{
    char dir[600], out[700];
    snprintf(out, sizeof out, "%s/out", work);
    copy_case("plain_t37_d24", dir, sizeof dir);
    write_text(dir, "case.json", "{\"scale\": 3e38}");
    const char *args[] = {"run", "05", dir, "--out", out, NULL};
    Outcome r = run_tool(args);
    EXPECT_REFUSED(r, "scale");
    write_text(dir, "case.json", "{}");
    const int64_t q[4] = {2, 2, 37, 24}; /* plain_t37_d24's shape */
    write_filled(dir, "q.npy", NPY_FLOAT32, 4, q, 1e30);
    r = run_tool(args);
    EXPECT_REFUSED(r, "q.npy and k.npy");
    EXPECT(!exists(out));
}

/* The fuzzers' finite-overflow findings: magnitudes whose float32 sums or products would overflow
 * are refused, naming the file; the same scores without a backward pass still run. */
static void magnitudes(void)
{
    char dir[600], out[700], path[800];
    snprintf(out, sizeof out, "%s/out", work);
    const int64_t shape[4] = {1, 1, 37, 80}; /* causal_t37_d80's q, k, v, do */
    static const struct {
        const char *file;
        double fill;
        const char *json, *names;
    } cases[] = {{"v.npy", 1e37, "{\"causal\": true}", "v.npy"},
                 {"do.npy", 1e30, "{\"causal\": true}", "do.npy"},
                 {"q.npy", 1e20, "{\"causal\": true, \"scale\": 1e-30}", "before the scale"},
                 {NULL, 0.0, "{\"causal\": true, \"scale\": 100000}", "recomputes exp"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        copy_case("causal_t37_d80", dir, sizeof dir);
        write_text(dir, "case.json", cases[i].json);
        if (cases[i].file)
            write_filled(dir, cases[i].file, NPY_FLOAT32, 4, shape, cases[i].fill);
        if (cases[i].file && !strcmp(cases[i].file, "q.npy"))
            write_filled(dir, "k.npy", NPY_FLOAT32, 4, shape, cases[i].fill);
        const char *args[] = {"run", "10", dir, "--out", out, NULL};
        Outcome r = run_tool(args);
        EXPECT_REFUSED(r, cases[i].names);
        EXPECT(!exists(out));
    }
    snprintf(path, sizeof path, "%s/do.npy", dir); /* the large scale without a backward pass runs */
    unlink(path);
    const char *args[] = {"run", "10", dir, "--out", out, NULL};
    Outcome r = run_tool(args);
    EXPECT_EXIT(r, 0);
    /* MLA: x and ckv of 1e18 make q_lat . ckv pass float32's range; stage 09 wrote y = 0 or NaN */
    copy_case("mla_decode_tq2", dir, sizeof dir);
    scale_file(dir, "x.npy", 1e18);
    scale_file(dir, "ckv.npy", 1e18);
    snprintf(out, sizeof out, "%s/out_mla", work);
    const char *mla_args[] = {"run", "09", dir, "--out", out, NULL};
    r = run_tool(mla_args);
    EXPECT_REFUSED(r, "ckv.npy");
    EXPECT(!exists(out));
}

/* 5. --out may not be the case folder, lie inside one, or hold a case's input files. */
static void out_into_case(void)
{
    char dir[600], sub[700], slash[700], before_file[700];
    copy_case("causal_t37_d80", dir, sizeof dir);
    snprintf(before_file, sizeof before_file, "%s/o.npy", dir);
    size_t n_before, n_after;
    char *before = read_bytes(before_file, &n_before);
    snprintf(sub, sizeof sub, "%s/sub/deeper", dir);
    snprintf(slash, sizeof slash, "%s/", dir);
    const char *targets[] = {dir, slash, sub};
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"run", "07", dir, "--out", targets[i], NULL};
        Outcome r = run_tool(args);
        EXPECT_REFUSED(r, "--out");
    }
    char *after = read_bytes(before_file, &n_after);
    EXPECT(before && after && n_before == n_after && memcmp(before, after, n_before) == 0);
    EXPECT(!exists(sub));
    free(before);
    free(after);
    /* a folder that holds another case's inputs */
    char other[600];
    copy_case("plain_t1", other, sizeof other);
    const char *args[] = {"run", "07", dir, "--out", other, NULL};
    Outcome r = run_tool(args);
    EXPECT_REFUSED(r, "--out");
}

/* 6. A dangling symbolic link for an optional input is an error, not an absent file. */
static void dangling_link(void)
{
    static const char *const files[] = {"do.npy", "sinks.npy"};
    char dir[600], link[700], out[700];
    snprintf(out, sizeof out, "%s/out", work);
    for (int i = 0; i < 2; i++) {
        copy_case("plain_t37_d24", dir, sizeof dir);
        snprintf(link, sizeof link, "%s/%s", dir, files[i]);
        unlink(link);
        if (symlink("no_such_file.npy", link) != 0)
            test_fail(__FILE__, __LINE__, "symlink %s: %s", link, strerror(errno));
        const char *args[] = {"run", "10", dir, "--out", out, NULL};
        Outcome r = run_tool(args);
        EXPECT_REFUSED(r, files[i]);
        EXPECT(!exists(out));
    }
}

/* 7. A FIFO in place of an input or case.json: refused at once, never waited on. */
static void fifo_input(void)
{
    static const char *const files[] = {"q.npy", "case.json"};
    char dir[600], path[700];
    for (int i = 0; i < 2; i++) {
        copy_case("plain_t1", dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
        if (mkfifo(path, 0644) != 0)
            test_fail(__FILE__, __LINE__, "mkfifo %s: %s", path, strerror(errno));
        const char *args[] = {"check", "01", dir, NULL};
        Outcome r = run_tool(args);
        EXPECT_REFUSED(r, "not a regular file");
    }
}

/* 8. Outputs of 2 GB from a 200 KB case, for a stage that refuses the head dims anyway: refused
 * before the outputs exist (the child may not map more than 1 GiB; skipped under ASan, which
 * reserves terabytes of shadow memory). */
static void huge_output(void)
{
    /* A 2 GiB o.npy once was allocated and filled before the refusal. The refusal must now come
     * before any large allocation: its peak resident memory stays far below 2 GiB (a CUDA build
     * holds about 200 MiB of libraries for any command). */
    const long peak_limit_kib = 768L * 1024;
    char dir[600], out[700];
    snprintf(dir, sizeof dir, "%s/huge", work);
    snprintf(out, sizeof out, "%s/out", work);
    mkdir(dir, 0777);
    const int64_t q[4] = {1, 1, 32768, 1}, k[4] = {1, 1, 1, 1}, v[4] = {1, 1, 1, 16384};
    write_filled(dir, "q.npy", NPY_FLOAT32, 4, q, 0.5);
    write_filled(dir, "k.npy", NPY_FLOAT32, 4, k, 0.5);
    write_filled(dir, "v.npy", NPY_FLOAT32, 4, v, 0.5);
    const char *args[] = {"run", "05", dir, "--out", out, NULL};
    Outcome r = run_tool(args);
    EXPECT_REFUSED(r, "SRAM");
    EXPECT(!exists(out));
    if (r.peak_kib >= peak_limit_kib)
        test_fail(__FILE__, __LINE__, "the refusal peaked at %ld MiB of memory", r.peak_kib / 1024);
}

/* 9. Header bytes copied into a message (a key with a newline and an escape) stay one line. */
static void header_control_bytes(void)
{
    char dir[600], path[700];
    copy_case("plain_t1", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/k.npy", dir);
    char file[128] = "\x93NUMPY\x01\x00";
    const char header[] = "{'a\nb\x1b[31m': 1, }";
    const size_t hlen = sizeof header - 1;
    file[8] = (char)hlen, file[9] = 0;
    memcpy(file + 10, header, hlen);
    write_bytes(path, file, 10 + hlen);
    const char *args[] = {"check", "01", dir, NULL};
    Outcome r = run_tool(args);
    EXPECT_REFUSED(r, "k.npy");
}

/* 10. Shapes NumPy refuses: "(5)" is a number, not a tuple; "(005,)" is not a Python literal. */
static void shape_literals(void)
{
    static const char *const shapes[] = {"(5)", "(005,)", "(2, 03)"};
    for (int i = 0; i < 3; i++) {
        char path[700], file[256], header[128];
        snprintf(path, sizeof path, "%s/shape.npy", work);
        int hlen = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }\n",
                            shapes[i]);
        memcpy(file, "\x93NUMPY\x01\x00", 8);
        file[8] = (char)hlen, file[9] = 0;
        memcpy(file + 10, header, (size_t)hlen);
        memset(file + 10 + hlen, 0, 24); /* room for 6 floats */
        write_bytes(path, file, 10 + (size_t)hlen + (i == 2 ? 24 : 20));
        Tensor t;
        FlError err;
        if (npy_read(path, &t, &err) != FL_BAD_INPUT) {
            test_fail(__FILE__, __LINE__, "shape %s was accepted", shapes[i]);
            tensor_free(&t);
        }
    }
}

/* The non-finite rule on the command line: one warning naming the file, the count and the first
 * index; the outputs of the row that reads the NaN are NaN, the others finite and right. */
static void nan_input(void)
{
    char dir[600], out[700], path[800];
    copy_case("causal_t37_d80", dir, sizeof dir);
    snprintf(out, sizeof out, "%s/out", work);
    snprintf(path, sizeof path, "%s/q.npy", dir);
    Tensor q;
    FlError err;
    if (npy_read(path, &q, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    q.data[3 * 80 + 1] = nanf(""); /* q[0, 0, 3, 1] */
    npy_write(path, &q, &err);
    tensor_free(&q);
    const char *args[] = {"run", "07", dir, "--out", out, NULL};
    Outcome r = run_tool(args);
    EXPECT_EXIT(r, 0);
    EXPECT(one_clean_line(r.err) && strstr(r.err, "warning") && strstr(r.err, "q.npy") &&
           strstr(r.err, "1 non-finite value") && strstr(r.err, "[0, 0, 3, 1]"));
    Tensor o = {0};
    snprintf(path, sizeof path, "%s/o.npy", out);
    if (npy_read(path, &o, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    for (int i = 0; i < 37; i++)
        for (int c = 0; c < 80; c++)
            EXPECT(isnan(o.data[i * 80 + c]) == (i == 3));
    tensor_free(&o);
}

/* ---- main -------------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*run)(void);
} items[] = {{"paged_seq_len", paged_seq_len},       {"huge_window", huge_window},
             {"huge_scale", huge_scale},             {"magnitudes", magnitudes},
             {"out_into_case", out_into_case},
             {"dangling_link", dangling_link},       {"fifo_input", fifo_input},
             {"huge_output", huge_output},           {"header_control_bytes", header_control_bytes},
             {"shape_literals", shape_literals},     {"nan_input", nan_input}};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_hostile FLASHLAB GOLDEN_DIR ITEM\n");
        return 2;
    }
    flashlab = argv[1], golden = argv[2];
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (strcmp(argv[3], items[i].name) != 0)
            continue;
        if (test_tmpdir_make(work, sizeof work, items[i].name) != 0)
            return 1;
        items[i].run();
        int code = test_exit_code(items[i].name);
        test_tmpdir_remove(work);
        return code;
    }
    fprintf(stderr, "test_hostile: unknown item '%s'\n", argv[3]);
    return 2;
}
