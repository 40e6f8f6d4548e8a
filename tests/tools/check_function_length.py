#!/usr/bin/env python3
"""Checks that no function in the given folders is longer than a limit (in lines, from the line of
its opening brace to the line of its closing brace).

Issue 14 asks that node/ (the site worker) and cli/ (flag glue) hold no function longer than
about 150 lines: a longer one is doing a library's work or several jobs at once.

The C++ is read as text: comments and string literals are blanked, then braces are matched. A
brace opens a function body when the text before it (since the last `;`, `{` or `}`) ends like
a function head (a parameter list, optionally followed by const/override/noexcept, a trailing
return type or a constructor's initializer list); a brace after namespace/class/struct/enum or
`=` opens a scope, not a function. Braces inside a function (blocks, lambdas) count toward it.

Prints one line per function over the limit (file:line: name is N lines, limit L) and exits 1,
else one summary line and exits 0.
Usage: check_function_length.py ROOT LIMIT FOLDER...   |   check_function_length.py --self-test
"""
import os
import re
import sys
import tempfile

SCOPE_HEAD = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$')
FUNC_HEAD = re.compile(
    r'\)\s*(const|override|noexcept|final|mutable|\s)*(->\s*[\w:<>,\s*&]+)?$')


def blank_comments_and_strings(src):
    """src with comments and string/char literals removed (newlines kept, so lines still count)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith('//', i):
            j = src.find('\n', i)
            i = n if j < 0 else j
            continue
        if src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * src.count('\n', i, j))
            i = j
            continue
        raw = re.match(r'R"([^(\s]*)\(', src[i:i + 20]) if src.startswith('R"', i) else None
        if raw:
            end = ')' + raw.group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append('""' + '\n' * src.count('\n', i, j))
            i = j
            continue
        c = src[i]
        # A quote starts a literal unless it is a digit separator (1'000'000).
        if c == '"' or (c == "'" and not (i > 0 and src[i - 1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def functions(text):
    """(first line, line count, name) of every function body in the C++ source text."""
    s = blank_comments_and_strings(text)
    stack = []  # 'scope' | 'func' | 'block', with the function's start line and name
    head, line, found = [], 1, []
    for ch in s:
        if ch == '\n':
            line += 1
        if ch == '{':
            h = ''.join(head).strip()
            if any(kind == 'func' for kind, _, _ in stack):
                stack.append(('block', line, ''))
            elif SCOPE_HEAD.search(h) or h.endswith('=') or not (
                    FUNC_HEAD.search(h) or (')' in h and ':' in h.rsplit(')', 1)[-1])):
                stack.append(('scope', line, ''))
            else:
                names = re.findall(r'([\w:~]+)\s*\(', h)
                stack.append(('func', line, names[0] if names else '?'))
            head = []
        elif ch == '}':
            if stack:
                kind, start, name = stack.pop()
                if kind == 'func':
                    found.append((start, line - start + 1, name))
            head = []
        elif ch == ';':
            head = []
        else:
            head.append(ch)
    return found


def check(root, limit, folders):
    over, count = [], 0
    for folder in folders:
        for dirpath, _, files in sorted(os.walk(os.path.join(root, folder))):
            for f in sorted(files):
                if not f.endswith(('.cc', '.h', '.cpp', '.hpp')):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding='utf-8', errors='replace') as fh:
                    for start, length, name in functions(fh.read()):
                        count += 1
                        if length > limit:
                            over.append('%s:%d: %s is %d lines, limit %d' %
                                        (os.path.relpath(path, root), start, name, length, limit))
    return over, count


def self_test():
    long_body = '\n'.join('  x += %d;' % i for i in range(12))
    planted = {
        'node/a.cc': 'namespace n {\nint f(int x) {\n' + long_body + '\n  return x;\n}\n'
                     'struct S {\n  int g() const { return 1; }\n};\n}  // namespace n\n',
        'cli/b.cc': 'Foo::Foo(int a) : a_(a) {\n' + long_body + '\n  auto l = [&] { return 1; };\n}\n'
                    'const char* s = "}{ not a brace";\nint h() {\n  // }\n  return 0;\n}\n',
        'cli/c.h': 'inline auto k() -> int {\n' + long_body + '\n}\nenum class E { kA, kB };\n',
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), 'w') as fh:
                fh.write(text)
        over, count = check(tmp, 10, ['node', 'cli'])
    want = ['node/a.cc:2: f is 15 lines, limit 10', 'cli/b.cc:1: Foo::Foo is 15 lines, limit 10',
            'cli/c.h:1: k is 14 lines, limit 10']
    if sorted(over) != sorted(want) or count != 5:
        print('check_function_length --self-test: FAILED: got %r (%d functions), want %r (5)' %
              (over, count, want), file=sys.stderr)
        return 1
    print('check_function_length --self-test: the 3 planted long functions are reported, '
          'the 2 short ones are not')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, limit, folders = argv[1], int(argv[2]), argv[3:]
    over, count = check(root, limit, folders)
    for line in over:
        print(line)
    if over:
        print('check_function_length: %d function(s) over %d lines in %s' %
              (len(over), limit, ', '.join(folders)), file=sys.stderr)
        return 1
    print('check_function_length: %d functions in %s, none over %d lines' %
          (count, ', '.join(folders), limit))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
