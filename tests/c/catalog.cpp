/* catalog.cpp: a C++ program nobody marked, spending its time in the language's and its
 * library's own features, each timed by the program itself, for the built-in rules' C++ entries:
 * throwing and catching exceptions, compiling std::regex and matching with it, dynamic_cast
 * across a class hierarchy, locale facets, operator new/delete, writing through an iostream
 * (output) and snprintf (formatting); between them, its own work.
 *
 *   catalog SECONDS --truth FILE
 *
 * The truth: per feature (exceptions, regex-compile, regex-match, dynamic-casts, locale,
 * allocation, output, formatting), the time measured around its uses. Allocation is its own loop's new and delete
 * only (the other features allocate too, inside themselves); its instance is that loop's line.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <locale>
#include <memory>
#include <regex>
#include <string>

extern "C" {
#include "clock.h"
}

/* Where results go, so that the compiler keeps the work that makes them. */
static volatile long sink;

static unsigned long long state = 88172645463325252ULL;
static unsigned long long next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* Exceptions: thrown three calls down, caught here. */
struct Failure {
    int code;
};
__attribute__((noinline)) static int deepest(int i) {
    if (i >= 0) throw Failure{i};
    return i;
}
__attribute__((noinline)) static int middle(int i) { return deepest(i) + 1; }
__attribute__((noinline)) static int outer(int i) { return middle(i) + 1; }

__attribute__((noinline)) static double throw_some(int n) {
    double t0 = now_ms();
    int caught = 0;
    for (int i = 0; i < n; i++) {
        try {
            outer(i);
        } catch (const Failure &f) {
            caught += f.code & 1;
        }
    }
    double t = now_ms() - t0;
    sink = sink + caught;
    return t;
}

/* std::regex: a new pattern each time (compiling), then a search through a text. */
__attribute__((noinline)) static double compile_regex(std::unique_ptr<std::regex> &re, int round) {
    char pattern[128];
    std::snprintf(pattern, sizeof pattern, "([a-z]+)@([a-z]+)\\.(com|org|net%d) +[0-9]{2,%d}",
                  round % 5, 3 + round % 4);
    double t0 = now_ms();
    re = std::make_unique<std::regex>(pattern);
    return now_ms() - t0;
}

__attribute__((noinline)) static double match_regex(const std::regex &re, const std::string &text) {
    double t0 = now_ms();
    auto begin = std::sregex_iterator(text.begin(), text.end(), re);
    long found = std::distance(begin, std::sregex_iterator());
    double t = now_ms() - t0;
    sink = sink + found;
    return t;
}

/* dynamic_cast: down and across a hierarchy with virtual bases. */
struct Base {
    virtual ~Base() = default;
};
struct Left : virtual Base {};
struct Right : virtual Base {};
struct Both : Left, Right {};
struct Other : virtual Base {};
struct Deeper : Both {};
struct Deepest : Deeper, virtual Other {};

/* The objects, read through a volatile pointer: the compiler cannot know their types. */
static Base *volatile objects[5];

__attribute__((noinline)) static double cast_some(int n) {
    double t0 = now_ms();
    long hits = 0;
    for (int i = 0; i < n; i++) {
        Base *b = objects[i % 5];
        hits += dynamic_cast<Right *>(b) != nullptr;
        hits += dynamic_cast<Deeper *>(b) != nullptr;
        hits += dynamic_cast<Other *>(b) != nullptr;
    }
    double t = now_ms() - t0;
    sink = sink + hits;
    return t;
}

/* Locale: making locales with a facet replaced (the facets made before, untimed: their
 * constructors are not the locale's), asking them for facets, and dropping them. */
__attribute__((noinline)) static double use_locales(int n) {
    static std::numpunct<char> *facets[2000];
    if (n > 2000) n = 2000;
    for (int i = 0; i < n; i++) facets[i] = new std::numpunct<char>();
    long seen = 0;
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        std::locale loc(std::locale::classic(), facets[i]);
        seen += std::has_facet<std::ctype<char>>(loc);
        seen += std::use_facet<std::numpunct<char>>(loc).decimal_point();
    }
    double t = now_ms() - t0;
    sink = sink + seen;
    return t;
}

/* Allocation: new and delete of small arrays. */
__attribute__((noinline)) static double allocate(int n) {
    static char *keep[64];
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        int slot = i & 63;
        delete[] keep[slot];
        keep[slot] = new char[16 + (i % 200)];
    }
    return now_ms() - t0;
}

/* Output: lines written through an ofstream (its buffer flushed to the file as it fills). */
__attribute__((noinline)) static double write_stream(std::ofstream &out, int n) {
    double t0 = now_ms();
    for (int i = 0; i < n; i++) out << "line " << i << ' ' << i * 0.25 << '\n';
    return now_ms() - t0;
}

/* Formatting: numbers into text with snprintf. */
__attribute__((noinline)) static double format_text(int n) {
    char text[128];
    long length = 0;
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        length += std::snprintf(text, sizeof text, "%12.5f %08x %s %d", i * 1.618, i * 7919u,
                                "entry", i);
    }
    double t = now_ms() - t0;
    sink = sink + length;
    return t;
}

int main(int argc, char **argv) {
    if (argc != 4 || std::strcmp(argv[2], "--truth") != 0) {
        std::fprintf(stderr, "usage: catalog SECONDS --truth FILE\n");
        return 2;
    }
    double run_ms = std::atof(argv[1]) * 1000.0;
    std::string text;
    for (int i = 0; i < 300; i++) {
        char piece[96];
        std::snprintf(piece, sizeof piece, "user%c@host%c.com %d lorem ipsum dolor ", 'a' + i % 26,
                      'a' + i % 13, i * 37);
        text += piece;
    }
    Base *made[5] = {new Both, new Other, new Deepest, new Deeper, new Right};
    for (int i = 0; i < 5; i++) objects[i] = made[i];
    char path[] = "/tmp/fsprof-catalog-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 3;
    std::ofstream stream(path);
    unlink(path);
    close(fd);
    std::unique_ptr<std::regex> re;
    double exceptions = 0, compile = 0, matching = 0, casts = 0, locale = 0, allocation = 0;
    double output = 0, formatting = 0;
    double start = now_ms();
    int round = 0;
    while (now_ms() - start < run_ms) {
        round++;
        switch (next() % 9) {
        case 0: exceptions += throw_some(200); break;
        case 1: compile += compile_regex(re, round); break;
        case 2:
            if (!re) compile += compile_regex(re, round);
            matching += match_regex(*re, text);
            break;
        case 3: casts += cast_some(6000); break;
        case 4: locale += use_locales(2000); break;
        case 5: allocation += allocate(20000); break;
        case 6: output += write_stream(stream, 2000); break;
        case 7: formatting += format_text(2000); break;
        default: spin_us((unsigned)(300 + next() % 600)); break;
        }
    }
    double total = now_ms() - start;
    FILE *out = std::fopen(argv[3], "w");
    if (!out) return 3;
    std::fprintf(out,
                 "{\"total_ms\": %.3f, \"features\": {\"exceptions\": {\"ms\": %.3f, \"instances\": {}}, "
                 "\"regex-compile\": {\"ms\": %.3f, \"instances\": {}}, \"regex-match\": {\"ms\": %.3f, "
                 "\"instances\": {}}, \"dynamic-casts\": {\"ms\": %.3f, \"instances\": {}}, "
                 "\"locale\": {\"ms\": %.3f, \"instances\": {}}, \"allocation\": {\"ms\": %.3f, "
                 "\"instances\": {}}, \"output\": {\"ms\": %.3f, \"instances\": {}}, "
                 "\"formatting\": {\"ms\": %.3f, \"instances\": {}}}, \"extra\": {\"rounds\": %d}}\n",
                 total, exceptions, compile, matching, casts, locale, allocation, output, formatting,
                 round);
    std::fclose(out);
    return 0;
}
