"""Every language of the polyglot image's table, through the REPL as the host drives it: hello
world, an input CSV summed, a file written and returned, a compile or syntax error, a runtime
error, a timeout and an output flood. Run by `images/test.sh polyglot kiln-polyglot:latest`, under
the production hardening (/tmp noexec: compiled programs run from memory)."""

import json
import os
import time
import unittest
from dataclasses import dataclass
from typing import Any

from repl_client import SERVER, Repl, ReplTestCase

TABLE = os.path.join(os.path.dirname(SERVER), "languages.json")
CSV = "x,y\n1,2\n3,4\n5,6\n"  # the sum of every number is 21
FLOOD_LIMIT = 10_000  # max_output_bytes of the flood test: 5,000 lines of 1,000 x's go far over it


@dataclass(frozen=True)
class Programs:
    """One language's test programs. compile_error is code that does not compile (or parse),
    error its one-line error (a regular expression), and error_output a part of its stderr.
    runtime_error prints "before", then fails with exit code runtime_exit."""

    hello: str
    csv_sum: str
    write_file: str
    compile_error: str
    error: str
    error_output: str
    runtime_error: str
    runtime_exit: int
    runtime_output: str
    forever: str
    flood: str
    runtime_signal: str = ""  # the signal that ended runtime_error, if one did


PROGRAMS: dict[str, Programs] = {
    "js": Programs(
        hello='console.log("hello, world");\n',
        csv_sum=('const fs = require("fs");\n'
                 'const rows = fs.readFileSync("data.csv", "utf8").trim().split("\\n").slice(1);\n'
                 "let sum = 0;\n"
                 'for (const row of rows) for (const v of row.split(",")) sum += Number(v);\n'
                 "console.log(sum);\n"),
        write_file='import { writeFileSync } from "fs";\nwriteFileSync("out.txt", "hello from js\\n");\n',
        compile_error='console.log("ran");\nlet x = ;\n',
        error=r"^SyntaxError: Unexpected token ';'$",
        error_output="main.js:2",
        runtime_error='console.log("before");\nthrow new Error("boom");\n',
        runtime_exit=1,
        runtime_output="Error: boom",
        forever="while (true) {}\n",
        flood='const line = "x".repeat(1000) + "\\n";\nfor (let i = 0; i < 5000; i++) process.stdout.write(line);\n',
    ),
    "ts": Programs(
        hello='const greeting: string = "hello, world";\nconsole.log(greeting);\n',
        csv_sum=('import * as fs from "fs";\n'
                 'const rows: string[] = fs.readFileSync("data.csv", "utf8").trim().split("\\n").slice(1);\n'
                 "let sum: number = 0;\n"
                 'for (const row of rows) for (const v of row.split(",")) sum += Number(v);\n'
                 "console.log(sum);\n"),
        write_file=('import { writeFileSync } from "fs";\n'
                    'interface Note { text: string }\n'
                    'const note: Note = { text: "hello from ts\\n" };\n'
                    'writeFileSync("out.txt", note.text);\n'),
        compile_error='console.log("ran");\nlet x: number = ;\n',
        error=r"^main\.ts\(2,17\): error TS1109: Expression expected\.$",
        error_output="error TS1109",
        runtime_error='console.log("before");\nfunction fail(): never { throw new Error("boom"); }\nfail();\n',
        runtime_exit=1,
        runtime_output="main.ts:2",  # the stack trace points into the TypeScript (source maps)
        forever="while (true) {}\n",
        flood='const line: string = "x".repeat(1000) + "\\n";\nfor (let i = 0; i < 5000; i++) process.stdout.write(line);\n',
    ),
    "c": Programs(
        hello='#include <stdio.h>\nint main(void) { printf("hello, world\\n"); return 0; }\n',
        csv_sum=("#include <stdio.h>\n"
                 "int main(void) {\n"
                 '  FILE *f = fopen("data.csv", "r");\n'
                 "  char header[64];\n"
                 "  long sum = 0; int a, b;\n"
                 "  if (!f || !fgets(header, sizeof header, f)) return 1;\n"
                 '  while (fscanf(f, "%d,%d", &a, &b) == 2) sum += a + b;\n'
                 '  printf("%ld\\n", sum);\n'
                 "  return 0;\n"
                 "}\n"),
        write_file=('#include <stdio.h>\n'
                    'int main(void) { FILE *f = fopen("out.txt", "w"); fputs("hello from c\\n", f); fclose(f); return 0; }\n'),
        compile_error="#include <stdio.h>\nint main(void) { puts(\"ran\") return 0; }\n",
        error=r"^main\.c:2:\d+: error: expected .;. before .return.$",
        error_output="puts(\"ran\") return 0;",
        runtime_error=("#include <stdio.h>\n"
                       "int main(void) { puts(\"before\"); fflush(stdout); volatile int *p = 0; *p = 1; return 0; }\n"),
        runtime_exit=139,
        runtime_output="",
        runtime_signal="SIGSEGV",
        forever="int main(void) { volatile unsigned long n = 0; for (;;) n++; }\n",
        flood=("#include <stdio.h>\n#include <string.h>\n"
               "int main(void) { char line[1002]; memset(line, 'x', 1000); line[1000] = '\\n'; line[1001] = 0;\n"
               "  for (int i = 0; i < 5000; i++) fputs(line, stdout); return 0; }\n"),
    ),
    "cpp": Programs(
        hello='#include <iostream>\nint main() { std::cout << "hello, world" << std::endl; }\n',
        csv_sum=("#include <fstream>\n#include <iostream>\n#include <sstream>\n#include <string>\n"
                 "int main() {\n"
                 '  std::ifstream in("data.csv");\n'
                 "  std::string line, cell;\n"
                 "  long sum = 0;\n"
                 "  std::getline(in, line);\n"
                 "  while (std::getline(in, line)) {\n"
                 "    std::stringstream row(line);\n"
                 "    while (std::getline(row, cell, ',')) sum += std::stol(cell);\n"
                 "  }\n"
                 '  std::cout << sum << "\\n";\n'
                 "}\n"),
        write_file='#include <fstream>\nint main() { std::ofstream("out.txt") << "hello from cpp\\n"; }\n',
        compile_error='#include <iostream>\nint main() {\n  undefined_thing();\n  std::cout << "ran";\n}\n',
        error=r"^main\.cpp:3:\d+: error: .undefined_thing. was not declared in this scope",
        error_output="undefined_thing();",
        runtime_error=('#include <iostream>\n#include <stdexcept>\n'
                       'int main() { std::cout << "before" << std::endl; throw std::runtime_error("boom"); }\n'),
        runtime_exit=134,
        runtime_output="boom",
        runtime_signal="SIGABRT",
        forever="int main() { volatile unsigned long n = 0; for (;;) n++; }\n",
        flood=('#include <iostream>\n#include <string>\n'
               "int main() { std::string line(1000, 'x'); for (int i = 0; i < 5000; i++) std::cout << line << '\\n'; }\n"),
    ),
    "java": Programs(
        # A helper class first and a main class of any name: the runner finds the main class.
        hello=('import java.util.List;\n'
               'class Greeter { static String greet() { return "hello, world"; } }\n'
               'public class Hello { public static void main(String[] args) { System.out.println(Greeter.greet()); } }\n'),
        csv_sum=("import java.nio.file.*;\nimport java.util.*;\n"
                 "public class Sum {\n"
                 "  public static void main(String[] args) throws Exception {\n"
                 '    List<String> lines = Files.readAllLines(Path.of("data.csv"));\n'
                 "    long sum = 0;\n"
                 "    for (String line : lines.subList(1, lines.size()))\n"
                 '      for (String v : line.split(",")) sum += Long.parseLong(v.trim());\n'
                 "    System.out.println(sum);\n"
                 "  }\n"
                 "}\n"),
        write_file=("import java.nio.file.*;\n"
                    "public class Main {\n"
                    "  public static void main(String[] args) throws Exception {\n"
                    '    Files.writeString(Path.of("out.txt"), "hello from java\\n");\n'
                    "  }\n"
                    "}\n"),
        compile_error=('public class Main {\n  public static void main(String[] args) {\n'
                       '    System.out.println("ran")\n  }\n}\n'),
        error=r"^Main\.java:3: error: ';' expected$",
        error_output="error: compilation failed",
        runtime_error=('public class Main {\n  public static void main(String[] args) {\n'
                       '    System.out.println("before");\n    throw new IllegalStateException("boom");\n  }\n}\n'),
        runtime_exit=1,
        runtime_output='Exception in thread "main" java.lang.IllegalStateException: boom',
        forever="public class Main { public static void main(String[] args) { while (true) {} } }\n",
        flood=('public class Main { public static void main(String[] args) {\n'
               '  String line = "x".repeat(1000);\n  for (int i = 0; i < 5000; i++) System.out.println(line); } }\n'),
    ),
    "php": Programs(
        hello='<?php\necho "hello, world\\n";\n',
        csv_sum=('<?php\n$rows = array_slice(file("data.csv", FILE_IGNORE_NEW_LINES), 1);\n$sum = 0;\n'
                 'foreach ($rows as $row) foreach (explode(",", $row) as $v) $sum += (int)$v;\necho $sum, "\\n";\n'),
        write_file='<?php\nfile_put_contents("out.txt", "hello from php\\n");\n',
        compile_error='<?php\necho "ran\\n";\n$x = ;\n',
        error=r'^PHP Parse error: +syntax error, unexpected token ";" in .*main\.php on line 3$',
        error_output="PHP Parse error:",
        runtime_error='<?php\necho "before\\n";\nthrow new Exception("boom");\n',
        runtime_exit=255,
        runtime_output="Uncaught Exception: boom",
        forever="<?php\nwhile (true) {}\n",
        flood='<?php\n$line = str_repeat("x", 1000) . "\\n";\nfor ($i = 0; $i < 5000; $i++) echo $line;\n',
    ),
    "rs": Programs(
        hello='fn main() {\n    println!("hello, world");\n}\n',
        csv_sum=("fn main() {\n"
                 '    let text = std::fs::read_to_string("data.csv").unwrap();\n'
                 "    let sum: i64 = text.lines().skip(1)\n"
                 "        .flat_map(|line| line.split(',').map(|v| v.trim().parse::<i64>().unwrap()).collect::<Vec<_>>())\n"
                 "        .sum();\n"
                 '    println!("{}", sum);\n'
                 "}\n"),
        write_file='fn main() {\n    std::fs::write("out.txt", "hello from rs\\n").unwrap();\n}\n',
        compile_error='fn main() {\n    let x: i32 = "ran";\n    println!("{}", x);\n}\n',
        error=r"^error\[E0308\]: mismatched types$",
        error_output="main.rs:2:",
        runtime_error='fn main() {\n    println!("before");\n    let v: Vec<i32> = Vec::new();\n    println!("{}", v[3]);\n}\n',
        runtime_exit=101,
        runtime_output="index out of bounds",
        forever="fn main() {\n    let mut n: u64 = 0;\n    loop { n = std::hint::black_box(n + 1); }\n}\n",
        flood=('use std::io::Write;\nfn main() {\n    let line = "x".repeat(1000);\n    let out = std::io::stdout();\n'
               '    let mut out = out.lock();\n    for _ in 0..5000 { writeln!(out, "{}", line).unwrap(); }\n}\n'),
    ),
    "go": Programs(
        hello='package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello, world")\n}\n',
        csv_sum=('package main\n\nimport (\n\t"encoding/csv"\n\t"fmt"\n\t"os"\n\t"strconv"\n)\n\n'
                 "func main() {\n"
                 '\tf, err := os.Open("data.csv")\n\tif err != nil {\n\t\tpanic(err)\n\t}\n'
                 "\trows, err := csv.NewReader(f).ReadAll()\n\tif err != nil {\n\t\tpanic(err)\n\t}\n"
                 "\tsum := 0\n\tfor _, row := range rows[1:] {\n\t\tfor _, v := range row {\n"
                 "\t\t\tn, _ := strconv.Atoi(v)\n\t\t\tsum += n\n\t\t}\n\t}\n"
                 "\tfmt.Println(sum)\n}\n"),
        write_file=('package main\n\nimport "os"\n\nfunc main() {\n'
                    '\tif err := os.WriteFile("out.txt", []byte("hello from go\\n"), 0o644); err != nil {\n\t\tpanic(err)\n\t}\n}\n'),
        compile_error='package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println(undefinedThing)\n}\n',
        error=r"^\./main\.go:6:\d+: undefined: undefinedThing$",
        error_output="# command-line-arguments",
        runtime_error='package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("before")\n\tpanic("boom")\n}\n',
        runtime_exit=2,
        runtime_output="panic: boom",
        forever="package main\n\nfunc main() {\n\tn := 0\n\tfor {\n\t\tn++\n\t}\n}\n",
        flood=('package main\n\nimport (\n\t"bufio"\n\t"os"\n\t"strings"\n)\n\n'
               'func main() {\n\tw := bufio.NewWriter(os.Stdout)\n\tdefer w.Flush()\n\tline := strings.Repeat("x", 1000) + "\\n"\n'
               "\tfor i := 0; i < 5000; i++ {\n\t\tw.WriteString(line)\n\t}\n}\n"),
    ),
    "d": Programs(
        hello='import std.stdio;\n\nvoid main() {\n    writeln("hello, world");\n}\n',
        csv_sum=("import std.stdio, std.file, std.string, std.conv, std.array;\n\n"
                 "void main() {\n"
                 "    long sum = 0;\n"
                 '    foreach (line; readText("data.csv").strip.splitLines[1 .. $])\n'
                 '        foreach (v; line.split(","))\n'
                 "            sum += v.strip.to!long;\n"
                 "    writeln(sum);\n"
                 "}\n"),
        write_file='import std.file;\n\nvoid main() {\n    write("out.txt", "hello from d\\n");\n}\n',
        compile_error='import std.stdio;\n\nvoid main() {\n    writeln("ran")\n}\n',
        error=r"^main\.d:\d+:\d+: error: found .}. when expecting .;.",
        error_output="main.d:",
        runtime_error='import std.stdio;\n\nvoid main() {\n    writeln("before");\n    stdout.flush();\n    throw new Exception("boom");\n}\n',
        runtime_exit=1,
        runtime_output="object.Exception@main.d(6): boom",
        forever="void main() {\n    ulong n = 0;\n    while (true) { n++; }\n}\n",
        flood='import std.stdio, std.array;\n\nvoid main() {\n    auto line = replicate("x", 1000);\n    foreach (i; 0 .. 5000) writeln(line);\n}\n',
    ),
    "f90": Programs(
        hello="program hello\n  print '(a)', 'hello, world'\nend program hello\n",
        csv_sum=("program csvsum\n"
                 "  implicit none\n"
                 "  integer :: a, b, total, ios\n"
                 "  character(len=100) :: header\n"
                 "  open(unit=10, file='data.csv', status='old', action='read')\n"
                 "  read(10, '(a)') header\n"
                 "  total = 0\n"
                 "  do\n"
                 "    read(10, *, iostat=ios) a, b\n"
                 "    if (ios /= 0) exit\n"
                 "    total = total + a + b\n"
                 "  end do\n"
                 "  close(10)\n"
                 "  print '(i0)', total\n"
                 "end program csvsum\n"),
        write_file=("program writer\n"
                    "  open(unit=11, file='out.txt', status='replace', action='write')\n"
                    "  write(11, '(a)') 'hello from f90'\n"
                    "  close(11)\n"
                    "end program writer\n"),
        compile_error="program bad\n  implicit none\n  integer :: x\n  x = = 1\n  print *, 'ran'\nend program bad\n",
        error=r"^Error: ",
        error_output="main.f90:4:",
        runtime_error="program fails\n  print '(a)', 'before'\n  error stop 3\nend program fails\n",
        runtime_exit=3,
        runtime_output="ERROR STOP 3",
        forever="program forever\n  integer :: n\n  n = 0\n  do\n    n = n + 1\n  end do\nend program forever\n",
        flood=("program flood\n  integer :: i\n  do i = 1, 5000\n    print '(a)', repeat('x', 1000)\n  end do\n"
               "end program flood\n"),
    ),
    "r": Programs(
        hello='cat("hello, world\\n")\n',
        csv_sum='d <- read.csv("data.csv")\ncat(sum(d), "\\n", sep = "")\n',
        write_file='writeLines("hello from r", "out.txt")\n',
        compile_error='cat("ran\\n")\nx <- (\n',
        error=r"^Error: main\.R:3:0: unexpected end of input$",
        error_output="x <- (",
        runtime_error='cat("before\\n")\nstop("boom")\n',
        runtime_exit=1,
        runtime_output="Error: boom",
        forever="n <- 0\nwhile (TRUE) { n <- n + 1 }\n",
        flood='line <- strrep("x", 1000)\nfor (i in 1:5000) cat(line, "\\n", sep = "")\n',
    ),
}


def table_languages() -> list[str]:
    with open(TABLE) as handle:
        return list(json.load(handle))


class LanguagesTest(ReplTestCase):
    """One REPL per test; each test goes through every language in subtests."""

    def repl(self) -> Repl:
        return self.start()

    def assertOutcome(self, response: dict[str, Any], status: str, exit_code: int, error: str | None) -> None:
        self.assertEqual((response["status"], response["exit_code"], response["error"]), (status, exit_code, error),
                         f"stdout={response['stdout'][:2000]!r} stderr={response['stderr'][:2000]!r}")

    def test_every_language_of_the_table_is_tested_and_ready(self) -> None:
        self.assertEqual(sorted(PROGRAMS), sorted(table_languages()))
        self.assertEqual(sorted(table_languages()), sorted(["js", "ts", "c", "cpp", "java", "php", "rs", "go", "d", "f90", "r"]))
        repl = self.repl()
        self.assertEqual(repl.ready["capabilities"]["languages"], ["python", "bash", *table_languages()])
        self.assertEqual(repl.log_text(), "")

    def test_hello_world(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.hello, lang=lang, state=b"a blob", capture_state=True)
                self.assertOutcome(response, "ok", 0, None)
                self.assertEqual(response["stdout"], "hello, world\n")
                self.assertEqual(response["stderr"], "")
                self.assertEqual(response["files"], [], "neither the source nor a compiled program comes back")
                self.assertEqual((response["state"], response["state_unchanged"]), (None, True),
                                 "only Python has a state")

    def test_input_csv_sum(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.csv_sum, lang=lang, files={"data.csv": CSV})
                self.assertOutcome(response, "ok", 0, None)
                self.assertEqual(response["stdout"], "21\n")
                self.assertEqual(response["files"], [])

    def test_written_file_comes_back(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.write_file, lang=lang)
                self.assertOutcome(response, "ok", 0, None)
                self.assertEqual([(f["path"], f["content"]) for f in response["files"]],
                                 [("out.txt", f"hello from {lang}\n".encode())])
                repl.run("rm -f out.txt", lang="bash")

    def test_compile_or_syntax_error(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.compile_error, lang=lang)
                self.assertEqual(response["status"], "error", response)
                self.assertNotEqual(response["exit_code"], 0)
                self.assertRegex(response["error"], programs.error)
                self.assertNotIn("\n", response["error"])
                self.assertIn(programs.error_output, response["stderr"], "the whole compiler output is in stderr")
                self.assertNotIn("ran", response["stdout"], "nothing ran")

    def test_runtime_error(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.runtime_error, lang=lang)
                want = f"Exit code {programs.runtime_exit}"
                if programs.runtime_signal:
                    want += f" (killed by {programs.runtime_signal})"
                self.assertOutcome(response, "error", programs.runtime_exit, want)
                self.assertEqual(response["stdout"], "before\n")
                self.assertIn(programs.runtime_output, response["stderr"])

    def test_timeout(self) -> None:
        repl = self.repl()
        count = "ls /proc | grep -c '^[0-9]'"
        processes = repl.run(count, lang="bash")["stdout"]
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                started = time.monotonic()
                response = repl.run(programs.forever, lang=lang, timeout_ms=4000)
                self.assertLess(time.monotonic() - started, 10)
                self.assertOutcome(response, "timeout", 124, "Time limit exceeded")
        self.assertEqual(repl.run(count, lang="bash")["stdout"], processes, "nothing is left running")

    def test_output_flood_is_capped(self) -> None:
        repl = self.repl()
        for lang, programs in PROGRAMS.items():
            with self.subTest(lang=lang):
                response = repl.run(programs.flood, lang=lang, limits={"max_output_bytes": FLOOD_LIMIT})
                self.assertOutcome(response, "ok", 0, None)
                self.assertTrue(response["truncated"])
                dropped = 5000 * 1001 - FLOOD_LIMIT
                self.assertEqual(response["stdout"], "x" * 1000 + "\n" + ("x" * 1000 + "\n") * 8 + "x" * 991 +
                                 f"\n[kiln: output truncated, {dropped} bytes dropped]\n")

    def test_args(self) -> None:
        programs = {
            "js": "console.log(process.argv.slice(2).join('|'));\n",
            "ts": "console.log(process.argv.slice(2).join('|'));\n",
            "c": '#include <stdio.h>\nint main(int c, char **v) { for (int i = 1; i < c; i++) printf(i > 1 ? "|%s" : "%s", v[i]); puts(""); }\n',
            "java": 'public class A { public static void main(String[] a) { System.out.println(String.join("|", a)); } }\n',
            "php": '<?php\necho implode("|", array_slice($argv, 1)), "\\n";\n',
            "rs": 'fn main() { println!("{}", std::env::args().skip(1).collect::<Vec<_>>().join("|")); }\n',
            "go": 'package main\n\nimport (\n\t"fmt"\n\t"os"\n\t"strings"\n)\n\nfunc main() { fmt.Println(strings.Join(os.Args[1:], "|")) }\n',
            "r": 'cat(paste(commandArgs(trailingOnly = TRUE), collapse = "|"), "\\n", sep = "")\n',
        }
        repl = self.repl()
        for lang, code in programs.items():
            with self.subTest(lang=lang):
                response = repl.run(code, lang=lang, args=["a", "b c", ""])
                self.assertOutcome(response, "ok", 0, None)
                self.assertEqual(response["stdout"], "a|b c|\n")

    def test_r_plot_is_a_file(self) -> None:
        repl = self.repl()
        code = ('png("plot.png", width = 400, height = 300)\nplot(1:10, main = "kiln")\ninvisible(dev.off())\n'
                'library(ggplot2)\np <- ggplot(data.frame(x = 1:3, y = c(2, 3, 1)), aes(x, y)) + geom_line()\n'
                'ggsave("gg.png", p, width = 4, height = 3, dpi = 50)\n'
                'cat(capabilities("png"), capabilities("cairo"), "\\n")\n')
        response = repl.run(code, lang="r")
        self.assertOutcome(response, "ok", 0, None)
        self.assertEqual(response["stdout"], "TRUE TRUE \n")
        files = {f["path"]: f["content"] for f in response["files"]}
        self.assertEqual(sorted(files), ["gg.png", "plot.png"])
        for content in files.values():
            self.assertTrue(content.startswith(b"\x89PNG\r\n\x1a\n"))

    def test_r_plot_with_the_cairo_package(self) -> None:
        # What LibreChat's code tool tells models to do for R graphics.
        repl = self.repl()
        code = ('library(Cairo)\nCairoPNG("cairo.png", width = 300, height = 200)\nplot(1:5)\n'
                'invisible(dev.off())\ncat("drawn\\n")\n')
        response = repl.run(code, lang="r")
        self.assertOutcome(response, "ok", 0, None)
        self.assertEqual(response["stdout"], "drawn\n")
        files = {f["path"]: f["content"] for f in response["files"]}
        self.assertEqual(sorted(files), ["cairo.png"])
        self.assertTrue(files["cairo.png"].startswith(b"\x89PNG\r\n\x1a\n"))

    def test_r_packages(self) -> None:
        repl = self.repl()
        code = ('suppressPackageStartupMessages({library(jsonlite); library(data.table); library(dplyr); library(tidyr)})\n'
                'd <- data.table(x = c(1, 2, 3))\ncat(toJSON(list(n = nrow(d), s = sum(d$x))), "\\n")\n'
                'cat(nrow(tibble(a = 1:2) %>% filter(a > 1)), "\\n")\n')
        response = repl.run(code, lang="r")
        self.assertOutcome(response, "ok", 0, None)
        self.assertEqual(response["stdout"], '{"n":[3],"s":[6]} \n1 \n')

    def test_deadline_covers_the_compile(self) -> None:
        repl = self.repl()
        started = time.monotonic()
        response = repl.run(PROGRAMS["rs"].hello, lang="rs", timeout_ms=50)
        self.assertLess(time.monotonic() - started, 5)
        self.assertOutcome(response, "timeout", 124, "Time limit exceeded")
        left = repl.run("cat /proc/[0-9]*/comm 2>/dev/null | grep -c -E '^(rustc|cc|ld)' || true", lang="bash")
        self.assertEqual(left["stdout"], "0\n")

    def test_interrupt_a_compiled_program(self) -> None:
        repl = self.repl()
        request_id = repl.start_run('#include <stdio.h>\n#include <unistd.h>\nint main(void) { puts("start"); fflush(stdout); sleep(60); }\n',
                                    lang="c")
        time.sleep(3)
        repl.interrupt(request_id)
        response = repl.read_frame(20)
        self.assertOutcome(response, "cancelled", 130, "Interrupted")
        self.assertEqual(response["stdout"], "start\n")

    def test_tools_are_for_python_and_bash(self) -> None:
        repl = self.repl()
        response = repl.run(PROGRAMS["js"].hello, lang="js", tools=[{"name": "t", "function": "t"}])
        self.assertEqual((response["type"], response["error"]), ("error", "bad request: tools cannot be called from js"))

    def test_python_state_survives_other_languages(self) -> None:
        repl = self.repl()
        self.assertOk(repl.run("kept = 41"))
        self.assertOk(repl.run(PROGRAMS["c"].hello, lang="c"))
        self.assertEqual(repl.run("kept + 1")["result"], "42")


if __name__ == "__main__":
    unittest.main()
