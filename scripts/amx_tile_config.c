/* The AMX deaths of docs/findings.md 37, outside pyggml and ggml: ggml's tile configuration, loaded as
 * ggml-cpu/amx/mmq.cpp (ggml_tile_config_init) loads it, then read back with sttilecfg, and a tile product run
 * on it in a child process.
 *
 *   cc -O2 -mamx-tile -mamx-int8 -o amx_tile_config scripts/amx_tile_config.c && ./amx_tile_config
 *
 * With GCC 12's amxtileintrin.h, `_tile_loadconfig(&tc)` is an asm whose memory operand is 8 bytes of `tc`: the
 * stores of rows[] and colsb[] are dead to the compiler and dropped, the tiles are configured with 0 rows, and
 * the product dies (SIGILL). Loaded the way ggml patch 0037 loads it (an asm that reads all 64 bytes first),
 * the same configuration keeps its rows and the product is right. Prints what CPUID, XCR0 and Linux say, so a
 * machine that cannot run AMX at all is told apart. Exit status: 0 when the fixed load computes right, 1 when
 * it does not, 2 when this machine or Linux offers no AMX. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config_t;

static tile_config_t read_back; /* global: after sttilecfg and a "memory" clobber, the compiler reads it again */

/* ggml's configuration: tiles 0-1 8x64 bytes (B), 2-3 16x32 (A), 4-7 16x64 (C) */
static void fill(tile_config_t *tc) {
    tc->palette_id = 1;
    tc->start_row = 0;
    for (int i = 0; i < 8; i++) {
        tc->rows[i] = i < 2 ? 8 : 16;
        tc->colsb[i] = (i == 2 || i == 3) ? 32 : 64;
    }
}

static __attribute__((noinline)) void load_as_ggml(void) {
    tile_config_t tc = {0};
    fill(&tc);
    _tile_loadconfig(&tc);
}

static __attribute__((noinline)) void load_as_patched(void) {
    tile_config_t tc = {0};
    fill(&tc);
    __asm__ volatile("" : : "m"(tc) : "memory");
    _tile_loadconfig(&tc);
}

/* C tile 4 (16x16 int32) = A tile 2 (16 rows of 32 int8) . B tile 0 (8 rows of 64 int8, VNNI: 4 k a column):
 * all ones times all twos over k = 32: 64 in every element */
static int product(void) {
    static int8_t a[16 * 32], b[8 * 64];
    static int32_t c[16 * 16];
    memset(a, 1, sizeof a);
    memset(b, 2, sizeof b);
    __asm__ volatile("" : : : "memory");
    _tile_zero(4);
    _tile_loadd(2, a, 32);
    _tile_loadd(0, b, 64);
    _tile_dpbssd(4, 2, 0);
    _tile_stored(4, c, 64);
    for (int i = 0; i < 16 * 16; i++)
        if (c[i] != 64) return 1;
    return 0;
}

static void try_load(const char *how, void (*load)(void), int *ok) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        load();
        _tile_storeconfig(&read_back);
        __asm__ volatile("" : : : "memory");
        printf("%-34s rows read back: %u %u %u %u %u %u %u %u\n", how, read_back.rows[0], read_back.rows[1],
               read_back.rows[2], read_back.rows[3], read_back.rows[4], read_back.rows[5], read_back.rows[6],
               read_back.rows[7]);
        fflush(stdout);
        _exit(product());
    }
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        printf("%-34s the product died: %s\n", how, strsignal(WTERMSIG(status)));
    else
        printf("%-34s the product is %s\n", how, WEXITSTATUS(status) == 0 ? "right" : "wrong");
    *ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void) {
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    int amx = (d >> 24) & 1 && (d >> 25) & 1;
    printf("CPUID.(7,0):EDX amx_tile %u, amx_int8 %u\n", (d >> 24) & 1, (d >> 25) & 1);
    if (!amx) return 2;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("XCR0 %#x: XTILECFG %u, XTILEDATA %u\n", lo, (lo >> 17) & 1, (lo >> 18) & 1);
    __cpuid_count(0x1d, 1, a, b, c, d);
    printf("CPUID.(1D,1) palette 1: %u tiles, %u rows of %u bytes at most\n", b >> 16, c & 0xffff, b & 0xffff);
    if (((lo >> 17) & 3) != 3) return 2;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)");
        return 2;
    }
    printf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): granted\n");
    int ggml_ok, patched_ok;
    try_load("_tile_loadconfig as ggml calls it:", load_as_ggml, &ggml_ok);
    try_load("with all 64 bytes read first:", load_as_patched, &patched_ok);
    return patched_ok ? 0 : 1;
}
