/* Many small files, as a build tool, a static site generator or a test runner sees them:
   a tree of 40 folders with 60 files each (2,400 files, 200 B to 4 KiB) is written under
   the folder given (default /scratch), then walked twice with opendir/readdir, each file
   stat'ed, opened, read through stdio and closed, its lines and words counted (as `wc`)
   and searched for a word (as `grep -c`), then every file and folder is deleted. Prints
   the totals and a checksum. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FOLDERS 40
#define FILES_PER_FOLDER 60

static uint32_t rng = 88172645u;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "many_files: %s %s\n", what, path);
    exit(1);
}

static void write_tree(const char *root) {
    static const char *words[] = {"alpha", "beta", "gamma", "delta", "needle", "omega", "sigma", "tau"};
    char path[512];
    if (mkdir(root, 0755) != 0) die("cannot create", root);
    for (int d = 0; d < FOLDERS; d++) {
        snprintf(path, sizeof path, "%s/dir%02d", root, d);
        if (mkdir(path, 0755) != 0) die("cannot create", path);
        for (int f = 0; f < FILES_PER_FOLDER; f++) {
            snprintf(path, sizeof path, "%s/dir%02d/file%03d.txt", root, d, f);
            FILE *out = fopen(path, "w");
            if (!out) die("cannot create", path);
            size_t size = 200 + next() % 3900, written = 0;
            while (written < size) {
                int n = fprintf(out, "%s %s %u\n", words[next() % 8], words[next() % 8], next() % 10000);
                written += (size_t)n;
            }
            if (fclose(out) != 0) die("cannot write", path);
        }
    }
}

struct totals {
    uint64_t files, bytes, lines, words, needles, checksum;
};

static void scan_file(const char *path, struct totals *t) {
    struct stat st;
    if (stat(path, &st) != 0) die("cannot stat", path);
    FILE *in = fopen(path, "r");
    if (!in) die("cannot open", path);
    char line[256];
    while (fgets(line, sizeof line, in)) {
        t->lines++;
        int in_word = 0;
        for (char *c = line; *c; c++) {
            t->checksum = t->checksum * 131u + (unsigned char)*c;
            int space = *c == ' ' || *c == '\n';
            if (!space && !in_word) t->words++;
            in_word = !space;
        }
        if (strstr(line, "needle")) t->needles++;
    }
    fclose(in);
    t->files++;
    t->bytes += (uint64_t)st.st_size;
}

/* Walks `folder` recursively, in name order (readdir's order is the filesystem's). */
static void walk(const char *folder, struct totals *t) {
    DIR *dir = opendir(folder);
    if (!dir) die("cannot list", folder);
    char *names[256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (count == 256) die("too many entries in", folder);
        names[count++] = strdup(e->d_name);
    }
    closedir(dir);
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *swap = names[j];
            names[j] = names[j - 1];
            names[j - 1] = swap;
        }
    char path[512];
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", folder, names[i]);
        struct stat st;
        if (stat(path, &st) != 0) die("cannot stat", path);
        if (S_ISDIR(st.st_mode)) walk(path, t);
        else scan_file(path, t);
        free(names[i]);
    }
}

static void remove_tree(const char *root) {
    char path[512];
    for (int d = 0; d < FOLDERS; d++) {
        for (int f = 0; f < FILES_PER_FOLDER; f++) {
            snprintf(path, sizeof path, "%s/dir%02d/file%03d.txt", root, d, f);
            if (unlink(path) != 0) die("cannot delete", path);
        }
        snprintf(path, sizeof path, "%s/dir%02d", root, d);
        if (rmdir(path) != 0) die("cannot delete", path);
    }
    if (rmdir(root) != 0) die("cannot delete", root);
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : "/scratch";
    char root[256];
    snprintf(root, sizeof root, "%s/tree", folder);
    write_tree(root);
    struct totals t = {0};
    for (int pass = 0; pass < 2; pass++) walk(root, &t);
    remove_tree(root);
    printf("%llu files, %llu bytes, %llu lines, %llu words, %llu needles\n",
           (unsigned long long)t.files, (unsigned long long)t.bytes, (unsigned long long)t.lines,
           (unsigned long long)t.words, (unsigned long long)t.needles);
    printf("checksum %016llx\n", (unsigned long long)t.checksum);
    return 0;
}
