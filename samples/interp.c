/*
 * interp.c: a tokenizer, a one-pass compiler and a stack-based bytecode VM for
 * a tiny imperative language, running a program embedded below.
 *
 * Usage: interp.wasm [N]   (N defaults to 100000; it is the variable `n`
 *                           the embedded program sees)
 *
 * The language:
 *   stmt  := IDENT '=' expr ';'
 *          | 'print' expr ';'
 *          | 'while' expr '{' stmt* '}'
 *          | 'if' expr '{' stmt* '}' [ 'else' '{' stmt* '}' ]
 *   expr  := comparison of sums of products of unary terms, with
 *            == != < <= > >=   + -   * / %   unary -   ( )
 *            numbers, variables and the builtin call mix(expr)
 * All values are 64-bit signed integers; division by zero gives 0.
 *
 * Output is deterministic for a given N. The last line is a checksum of
 * every value printed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static const char *PROGRAM =
    "# count the primes below n by trial division\n"
    "count = 0; i = 2;\n"
    "while i < n {\n"
    "  prime = 1; j = 2;\n"
    "  while j * j <= i {\n"
    "    if i % j == 0 { prime = 0; j = i; }\n"
    "    j = j + 1;\n"
    "  }\n"
    "  count = count + prime;\n"
    "  i = i + 1;\n"
    "}\n"
    "print count;\n"
    "# total Collatz steps of 1 .. n/2\n"
    "steps = 0; k = 1;\n"
    "while k <= n / 2 {\n"
    "  x = k;\n"
    "  while x != 1 {\n"
    "    if x % 2 == 0 { x = x / 2; } else { x = 3 * x + 1; }\n"
    "    steps = steps + 1;\n"
    "  }\n"
    "  k = k + 1;\n"
    "}\n"
    "print steps;\n"
    "# a hash chain through the builtin mix()\n"
    "h = 7; i = 0;\n"
    "while i < n {\n"
    "  h = mix(h + i) % 1000000007;\n"
    "  if h < 0 { h = -h; }\n"
    "  i = i + 1;\n"
    "}\n"
    "print h;\n";

/* ---------------------------------------------------------------- tokens */

enum tok {
    T_EOF, T_NUM, T_IDENT, T_PRINT, T_WHILE, T_IF, T_ELSE, T_MIX,
    T_LPAREN, T_RPAREN, T_LBRACE, T_RBRACE, T_SEMI, T_ASSIGN,
    T_PLUS, T_MINUS, T_STAR, T_SLASH, T_PERCENT,
    T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE,
};

struct token {
    enum tok kind;
    int64_t num;      /* T_NUM */
    int var;          /* T_IDENT: variable slot */
    int line;
};

#define MAX_TOKENS 4096
#define MAX_VARS 64
#define MAX_NAME 32

static struct token tokens[MAX_TOKENS];
static int ntokens;
static char var_names[MAX_VARS][MAX_NAME];
static int nvars;

static NOINLINE void die(const char *what, int line) {
    fprintf(stderr, "interp: %s (line %d)\n", what, line);
    exit(2);
}

static NOINLINE int intern(const char *name, size_t len, int line) {
    if (len >= MAX_NAME) die("identifier too long", line);
    for (int i = 0; i < nvars; i++)
        if (strlen(var_names[i]) == len && memcmp(var_names[i], name, len) == 0)
            return i;
    if (nvars == MAX_VARS) die("too many variables", line);
    memcpy(var_names[nvars], name, len);
    var_names[nvars][len] = 0;
    return nvars++;
}

static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void push_token(enum tok kind, int line) {
    if (ntokens == MAX_TOKENS) die("program too long", line);
    tokens[ntokens].kind = kind;
    tokens[ntokens].num = 0;
    tokens[ntokens].var = -1;
    tokens[ntokens].line = line;
    ntokens++;
}

/* Splits the source text into tokens[]; returns the number of tokens. */
static NOINLINE int tokenize(const char *src) {
    int line = 1;
    const char *p = src;
    ntokens = 0;
    while (*p) {
        char c = *p;
        if (c == '\n') { line++; p++; continue; }
        if (c == ' ' || c == '\t' || c == '\r') { p++; continue; }
        if (c == '#') { while (*p && *p != '\n') p++; continue; }
        if (is_digit(c)) {
            int64_t v = 0;
            while (is_digit(*p)) v = v * 10 + (*p++ - '0');
            push_token(T_NUM, line);
            tokens[ntokens - 1].num = v;
            continue;
        }
        if (is_alpha(c)) {
            const char *start = p;
            while (is_alpha(*p) || is_digit(*p)) p++;
            size_t len = (size_t)(p - start);
            if (len == 5 && memcmp(start, "print", 5) == 0) push_token(T_PRINT, line);
            else if (len == 5 && memcmp(start, "while", 5) == 0) push_token(T_WHILE, line);
            else if (len == 2 && memcmp(start, "if", 2) == 0) push_token(T_IF, line);
            else if (len == 4 && memcmp(start, "else", 4) == 0) push_token(T_ELSE, line);
            else if (len == 3 && memcmp(start, "mix", 3) == 0) push_token(T_MIX, line);
            else {
                push_token(T_IDENT, line);
                tokens[ntokens - 1].var = intern(start, len, line);
            }
            continue;
        }
        p++;
        switch (c) {
        case '(': push_token(T_LPAREN, line); break;
        case ')': push_token(T_RPAREN, line); break;
        case '{': push_token(T_LBRACE, line); break;
        case '}': push_token(T_RBRACE, line); break;
        case ';': push_token(T_SEMI, line); break;
        case '+': push_token(T_PLUS, line); break;
        case '-': push_token(T_MINUS, line); break;
        case '*': push_token(T_STAR, line); break;
        case '/': push_token(T_SLASH, line); break;
        case '%': push_token(T_PERCENT, line); break;
        case '=':
            if (*p == '=') { p++; push_token(T_EQ, line); } else push_token(T_ASSIGN, line);
            break;
        case '!':
            if (*p == '=') { p++; push_token(T_NE, line); } else die("expected '=' after '!'", line);
            break;
        case '<':
            if (*p == '=') { p++; push_token(T_LE, line); } else push_token(T_LT, line);
            break;
        case '>':
            if (*p == '=') { p++; push_token(T_GE, line); } else push_token(T_GT, line);
            break;
        default: die("unexpected character", line);
        }
    }
    push_token(T_EOF, line);
    return ntokens;
}

/* -------------------------------------------------------------- bytecode */

enum op {
    OP_PUSH, OP_LOAD, OP_STORE, OP_PRINT, OP_JMP, OP_JZ,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_NEG,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
    OP_MIX, OP_HALT,
};

struct insn {
    int32_t op;
    int32_t arg;      /* variable slot or jump target */
    int64_t imm;      /* OP_PUSH */
};

#define MAX_CODE 8192
static struct insn code[MAX_CODE];
static int ncode;
static int pos; /* parser position in tokens[] */

static int emit(enum op op, int32_t arg, int64_t imm) {
    if (ncode == MAX_CODE) die("program too big", tokens[pos].line);
    code[ncode].op = op;
    code[ncode].arg = arg;
    code[ncode].imm = imm;
    return ncode++;
}

static void expect(enum tok kind, const char *what) {
    if (tokens[pos].kind != kind) die(what, tokens[pos].line);
    pos++;
}

static void parse_expr(void);

static NOINLINE void parse_unary(void) {
    struct token *t = &tokens[pos];
    switch (t->kind) {
    case T_NUM: pos++; emit(OP_PUSH, 0, t->num); break;
    case T_IDENT: pos++; emit(OP_LOAD, t->var, 0); break;
    case T_MINUS: pos++; parse_unary(); emit(OP_NEG, 0, 0); break;
    case T_LPAREN: pos++; parse_expr(); expect(T_RPAREN, "expected ')'"); break;
    case T_MIX:
        pos++;
        expect(T_LPAREN, "expected '(' after mix");
        parse_expr();
        expect(T_RPAREN, "expected ')'");
        emit(OP_MIX, 0, 0);
        break;
    default: die("expected an expression", t->line);
    }
}

static NOINLINE void parse_product(void) {
    parse_unary();
    for (;;) {
        enum tok k = tokens[pos].kind;
        enum op op;
        if (k == T_STAR) op = OP_MUL;
        else if (k == T_SLASH) op = OP_DIV;
        else if (k == T_PERCENT) op = OP_MOD;
        else return;
        pos++;
        parse_unary();
        emit(op, 0, 0);
    }
}

static NOINLINE void parse_sum(void) {
    parse_product();
    for (;;) {
        enum tok k = tokens[pos].kind;
        enum op op;
        if (k == T_PLUS) op = OP_ADD;
        else if (k == T_MINUS) op = OP_SUB;
        else return;
        pos++;
        parse_product();
        emit(op, 0, 0);
    }
}

static NOINLINE void parse_expr(void) {
    parse_sum();
    enum op op;
    switch (tokens[pos].kind) {
    case T_EQ: op = OP_EQ; break;
    case T_NE: op = OP_NE; break;
    case T_LT: op = OP_LT; break;
    case T_LE: op = OP_LE; break;
    case T_GT: op = OP_GT; break;
    case T_GE: op = OP_GE; break;
    default: return;
    }
    pos++;
    parse_sum();
    emit(op, 0, 0);
}

static void parse_block(void);

static NOINLINE void parse_stmt(void) {
    struct token *t = &tokens[pos];
    switch (t->kind) {
    case T_IDENT: {
        int var = t->var;
        pos++;
        expect(T_ASSIGN, "expected '='");
        parse_expr();
        expect(T_SEMI, "expected ';'");
        emit(OP_STORE, var, 0);
        break;
    }
    case T_PRINT:
        pos++;
        parse_expr();
        expect(T_SEMI, "expected ';'");
        emit(OP_PRINT, 0, 0);
        break;
    case T_WHILE: {
        pos++;
        int top = ncode;
        parse_expr();
        int jz = emit(OP_JZ, 0, 0);
        parse_block();
        emit(OP_JMP, top, 0);
        code[jz].arg = ncode;
        break;
    }
    case T_IF: {
        pos++;
        parse_expr();
        int jz = emit(OP_JZ, 0, 0);
        parse_block();
        if (tokens[pos].kind == T_ELSE) {
            pos++;
            int jmp = emit(OP_JMP, 0, 0);
            code[jz].arg = ncode;
            parse_block();
            code[jmp].arg = ncode;
        } else {
            code[jz].arg = ncode;
        }
        break;
    }
    default: die("expected a statement", t->line);
    }
}

static NOINLINE void parse_block(void) {
    expect(T_LBRACE, "expected '{'");
    while (tokens[pos].kind != T_RBRACE) {
        if (tokens[pos].kind == T_EOF) die("unterminated block", tokens[pos].line);
        parse_stmt();
    }
    pos++;
}

/* Compiles tokens[] into code[]; returns the number of instructions. */
static NOINLINE int compile(void) {
    pos = 0;
    ncode = 0;
    while (tokens[pos].kind != T_EOF) parse_stmt();
    emit(OP_HALT, 0, 0);
    return ncode;
}

/* -------------------------------------------------------------------- VM */

/* The builtin mix(): a 64-bit finalizer-style integer mixer. */
static NOINLINE int64_t builtin_mix(int64_t v) {
    uint64_t x = (uint64_t)v;
    for (int round = 0; round < 4; round++) {
        x ^= x >> 31;
        x *= 0x7fb5d329728ea185ULL;
        x ^= x >> 27;
        x *= 0x81dadef4bc2dd44dULL;
        x ^= x >> 33;
    }
    return (int64_t)(x >> 1);
}

static uint64_t out_checksum = 1469598103934665603ULL;

static NOINLINE void builtin_print(int64_t v) {
    printf("%lld\n", (long long)v);
    uint64_t x = (uint64_t)v;
    for (int i = 0; i < 8; i++) {
        out_checksum ^= (x >> (8 * i)) & 0xff;
        out_checksum *= 1099511628211ULL;
    }
}

#define STACK 256

/* Runs code[] with the given variable slots; returns the instruction count. */
static NOINLINE uint64_t run(int64_t *vars) {
    int64_t stack[STACK];
    int sp = 0;
    int pc = 0;
    uint64_t executed = 0;
    for (;;) {
        const struct insn *in = &code[pc++];
        executed++;
        switch (in->op) {
        case OP_PUSH: stack[sp++] = in->imm; break;
        case OP_LOAD: stack[sp++] = vars[in->arg]; break;
        case OP_STORE: vars[in->arg] = stack[--sp]; break;
        case OP_PRINT: builtin_print(stack[--sp]); break;
        case OP_JMP: pc = in->arg; break;
        case OP_JZ: if (stack[--sp] == 0) pc = in->arg; break;
        case OP_ADD: sp--; stack[sp - 1] += stack[sp]; break;
        case OP_SUB: sp--; stack[sp - 1] -= stack[sp]; break;
        case OP_MUL: sp--; stack[sp - 1] *= stack[sp]; break;
        case OP_DIV: sp--; stack[sp - 1] = stack[sp] ? stack[sp - 1] / stack[sp] : 0; break;
        case OP_MOD: sp--; stack[sp - 1] = stack[sp] ? stack[sp - 1] % stack[sp] : 0; break;
        case OP_NEG: stack[sp - 1] = -stack[sp - 1]; break;
        case OP_EQ: sp--; stack[sp - 1] = stack[sp - 1] == stack[sp]; break;
        case OP_NE: sp--; stack[sp - 1] = stack[sp - 1] != stack[sp]; break;
        case OP_LT: sp--; stack[sp - 1] = stack[sp - 1] < stack[sp]; break;
        case OP_LE: sp--; stack[sp - 1] = stack[sp - 1] <= stack[sp]; break;
        case OP_GT: sp--; stack[sp - 1] = stack[sp - 1] > stack[sp]; break;
        case OP_GE: sp--; stack[sp - 1] = stack[sp - 1] >= stack[sp]; break;
        case OP_MIX: stack[sp - 1] = builtin_mix(stack[sp - 1]); break;
        case OP_HALT: return executed;
        default: die("bad opcode", 0);
        }
        if (sp >= STACK) die("stack overflow", 0);
    }
}

int main(int argc, char **argv) {
    int64_t n = 100000;
    if (argc > 1) {
        char *end;
        long long v = strtoll(argv[1], &end, 10);
        if (*end != 0 || v < 0) {
            fprintf(stderr, "usage: interp [N]\n");
            return 2;
        }
        n = v;
    }
    int nt = tokenize(PROGRAM);
    int nc = compile();
    int64_t vars[MAX_VARS] = {0};
    vars[intern("n", 1, 0)] = n;
    printf("tokens=%d insns=%d vars=%d n=%lld\n", nt, nc, nvars, (long long)n);
    uint64_t executed = run(vars);
    printf("executed=%llu\n", (unsigned long long)executed);
    printf("checksum=%016llx\n", (unsigned long long)out_checksum);
    return 0;
}
