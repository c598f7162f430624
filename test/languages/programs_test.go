package languages

// language is one `lang` of LibreChat's code tool and the programs the tests run in it.
type language struct {
	lang string
	// hello prints "hello from LANG", then each argument as "[ARG]" on a line of its own.
	hello string
	// files reads data.csv from the working directory, prints "sum=N" with N the sum of
	// its amount column, and writes "LANG:N\n" to out-LANG.txt there.
	files string
	// syntax does not compile (or parse); its one-line error contains syntaxSays.
	syntax     string
	syntaxSays string
	// crash prints "before" on stdout, then fails at run time saying "boom at runtime"
	// on stderr.
	crash string
	// loop prints "looping" and never ends.
	loop string
	// flood prints floodLines lines of floodWidth x's: floodBytes bytes in all.
	flood string
}

const (
	floodLines = 20000
	floodWidth = 99
	floodBytes = floodLines * (floodWidth + 1)
)

// languages are the languages of LibreChat's code tool, in its order: py and bash run
// in the python pool, the others in the polyglot pool.
var languages = []language{
	{
		lang: "py",
		hello: `import sys
print("hello from py")
for a in sys.argv[1:]:
    print(f"[{a}]")
`,
		files: `import csv
with open("data.csv") as f:
    total = sum(int(row["amount"]) for row in csv.DictReader(f))
with open("out-py.txt", "w") as f:
    f.write(f"py:{total}\n")
print(f"sum={total}")
`,
		syntax:     "print(\"unclosed\"\nprint(\"next\")\n",
		syntaxSays: "SyntaxError",
		crash:      "print(\"before\")\nraise RuntimeError(\"boom at runtime\")\n",
		loop:       "print(\"looping\", flush=True)\nwhile True:\n    pass\n",
		flood:      "line = \"x\" * 99\nfor _ in range(20000):\n    print(line)\n",
	},
	{
		lang: "js",
		hello: `console.log("hello from js");
for (const a of process.argv.slice(2)) console.log("[" + a + "]");
`,
		files: `const fs = require("fs");
const rows = fs.readFileSync("data.csv", "utf8").trim().split("\n").slice(1);
const sum = rows.reduce((s, row) => s + Number(row.split(",")[1]), 0);
fs.writeFileSync("out-js.txt", "js:" + sum + "\n");
console.log("sum=" + sum);
`,
		syntax:     "console.log(\"unclosed\";\n",
		syntaxSays: "SyntaxError: missing ) after argument list",
		crash:      "console.log(\"before\");\nthrow new Error(\"boom at runtime\");\n",
		loop:       "console.log(\"looping\");\nfor (;;) {}\n",
		flood:      "const line = \"x\".repeat(99);\nfor (let i = 0; i < 20000; i++) console.log(line);\n",
	},
	{
		lang: "ts",
		hello: `const args: string[] = process.argv.slice(2);
console.log("hello from ts");
for (const a of args) console.log("[" + a + "]");
`,
		files: `import * as fs from "fs";

interface Row {
  region: string;
  amount: number;
}

const rows: Row[] = fs.readFileSync("data.csv", "utf8").trim().split("\n").slice(1)
  .map((line: string): Row => {
    const [region, amount] = line.split(",");
    return { region, amount: Number(amount) };
  });
const sum: number = rows.reduce((s: number, r: Row) => s + r.amount, 0);
fs.writeFileSync("out-ts.txt", "ts:" + sum + "\n");
console.log("sum=" + sum);
`,
		syntax:     "const n: number = ;\nconsole.log(n);\n",
		syntaxSays: "TS1109",
		crash: `function fail(msg: string): never {
  throw new Error(msg);
}
console.log("before");
fail("boom at runtime");
`,
		loop:  "let n: number = 0;\nconsole.log(\"looping\");\nwhile (true) { n++; }\n",
		flood: "const line: string = \"x\".repeat(99);\nfor (let i: number = 0; i < 20000; i++) console.log(line);\n",
	},
	{
		lang: "c",
		hello: `#include <stdio.h>

int main(int argc, char **argv) {
    printf("hello from c\n");
    for (int i = 1; i < argc; i++) printf("[%s]\n", argv[i]);
    return 0;
}
`,
		files: `#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    FILE *in = fopen("data.csv", "r");
    if (in == NULL) { perror("data.csv"); return 2; }
    char line[256];
    long sum = 0;
    fgets(line, sizeof line, in);
    while (fgets(line, sizeof line, in) != NULL) {
        char *comma = strchr(line, ',');
        if (comma != NULL) sum += atol(comma + 1);
    }
    fclose(in);
    FILE *out = fopen("out-c.txt", "w");
    if (out == NULL) { perror("out-c.txt"); return 2; }
    fprintf(out, "c:%ld\n", sum);
    fclose(out);
    printf("sum=%ld\n", sum);
    return 0;
}
`,
		syntax:     "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", undeclared_total);\n    return 0;\n}\n",
		syntaxSays: "undeclared_total",
		crash: `#include <stdio.h>

int main(void) {
    puts("before");
    fflush(stdout);
    fputs("boom at runtime\n", stderr);
    volatile int *p = NULL;
    return *p;
}
`,
		loop:  "#include <stdio.h>\nint main(void) {\n    puts(\"looping\");\n    fflush(stdout);\n    volatile unsigned long n = 0;\n    for (;;) n = n + 1;\n}\n",
		flood: "#include <stdio.h>\n#include <string.h>\nint main(void) {\n    char line[100];\n    memset(line, 'x', 99);\n    line[99] = 0;\n    for (int i = 0; i < 20000; i++) puts(line);\n    return 0;\n}\n",
	},
	{
		lang: "cpp",
		hello: `#include <iostream>

int main(int argc, char **argv) {
    std::cout << "hello from cpp\n";
    for (int i = 1; i < argc; i++) std::cout << "[" << argv[i] << "]\n";
}
`,
		files: `#include <fstream>
#include <iostream>
#include <string>

int main() {
    std::ifstream in("data.csv");
    std::string line;
    long sum = 0;
    std::getline(in, line);
    while (std::getline(in, line)) sum += std::stol(line.substr(line.find(',') + 1));
    std::ofstream("out-cpp.txt") << "cpp:" << sum << "\n";
    std::cout << "sum=" << sum << std::endl;
}
`,
		syntax:     "#include <iostream>\nint main() {\n    std::cout << undeclared_total << std::endl;\n}\n",
		syntaxSays: "undeclared_total",
		crash: `#include <iostream>
#include <stdexcept>

int main() {
    std::cout << "before" << std::endl;
    throw std::runtime_error("boom at runtime");
}
`,
		loop:  "#include <iostream>\nint main() {\n    std::cout << \"looping\" << std::endl;\n    volatile unsigned long n = 0;\n    for (;;) n = n + 1;\n}\n",
		flood: "#include <iostream>\n#include <string>\nint main() {\n    const std::string line(99, 'x');\n    for (int i = 0; i < 20000; i++) std::cout << line << '\\n';\n}\n",
	},
	{
		lang: "java",
		hello: `public class Main {
    public static void main(String[] args) {
        System.out.println("hello from java");
        for (String a : args) System.out.println("[" + a + "]");
    }
}
`,
		files: `import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

public class Main {
    public static void main(String[] args) throws Exception {
        List<String> rows = Files.readAllLines(Path.of("data.csv"));
        long sum = 0;
        for (String row : rows.subList(1, rows.size())) sum += Long.parseLong(row.split(",")[1].trim());
        Files.writeString(Path.of("out-java.txt"), "java:" + sum + "\n");
        System.out.println("sum=" + sum);
    }
}
`,
		syntax: `public class Main {
    public static void main(String[] args) {
        int n = "not a number";
        System.out.println(n);
    }
}
`,
		syntaxSays: "incompatible types",
		crash: `public class Main {
    public static void main(String[] args) {
        System.out.println("before");
        throw new IllegalStateException("boom at runtime");
    }
}
`,
		loop: `public class Main {
    static volatile long n;

    public static void main(String[] args) {
        System.out.println("looping");
        while (true) n++;
    }
}
`,
		flood: `public class Main {
    public static void main(String[] args) {
        String line = "x".repeat(99);
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < 20000; i++) out.append(line).append('\n');
        System.out.print(out);
    }
}
`,
	},
	{
		lang: "php",
		hello: `<?php
echo "hello from php\n";
foreach (array_slice($argv, 1) as $a) {
    echo "[" . $a . "]\n";
}
`,
		files: `<?php
$rows = array_slice(file("data.csv", FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES), 1);
$sum = 0;
foreach ($rows as $row) {
    $sum += (int) explode(",", $row)[1];
}
file_put_contents("out-php.txt", "php:" . $sum . "\n");
echo "sum=" . $sum . "\n";
`,
		syntax:     "<?php\necho \"missing semicolon\"\necho \"next\";\n",
		syntaxSays: "syntax error",
		crash:      "<?php\necho \"before\\n\";\nthrow new RuntimeException(\"boom at runtime\");\n",
		loop:       "<?php\necho \"looping\\n\";\n$n = 0;\nwhile (true) {\n    $n++;\n}\n",
		flood:      "<?php\n$line = str_repeat(\"x\", 99) . \"\\n\";\nfor ($i = 0; $i < 20000; $i++) {\n    echo $line;\n}\n",
	},
	{
		lang: "rs",
		hello: `fn main() {
    println!("hello from rs");
    for a in std::env::args().skip(1) {
        println!("[{}]", a);
    }
}
`,
		files: `use std::fs;

fn main() {
    let text = fs::read_to_string("data.csv").expect("read data.csv");
    let sum: i64 = text
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').nth(1).unwrap().trim().parse::<i64>().unwrap())
        .sum();
    fs::write("out-rs.txt", format!("rs:{}\n", sum)).expect("write out-rs.txt");
    println!("sum={}", sum);
}
`,
		syntax:     "fn main() {\n    let n: i32 = \"not a number\";\n    println!(\"{}\", n);\n}\n",
		syntaxSays: "mismatched types",
		crash: `fn main() {
    println!("before");
    let v: Vec<i32> = Vec::new();
    if v.is_empty() {
        panic!("boom at runtime");
    }
}
`,
		loop: `fn main() {
    println!("looping");
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n + 1);
    }
}
`,
		flood: `use std::io::Write;

fn main() {
    let line = "x".repeat(99);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for _ in 0..20000 {
        writeln!(out, "{}", line).unwrap();
    }
}
`,
	},
	{
		lang: "go",
		hello: `package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("hello from go")
	for _, a := range os.Args[1:] {
		fmt.Printf("[%s]\n", a)
	}
}
`,
		files: `package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	data, err := os.ReadFile("data.csv")
	if err != nil {
		panic(err)
	}
	sum := 0
	for _, row := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
		n, err := strconv.Atoi(strings.TrimSpace(strings.Split(row, ",")[1]))
		if err != nil {
			panic(err)
		}
		sum += n
	}
	if err := os.WriteFile("out-go.txt", []byte(fmt.Sprintf("go:%d\n", sum)), 0o644); err != nil {
		panic(err)
	}
	fmt.Printf("sum=%d\n", sum)
}
`,
		syntax:     "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(undeclaredTotal)\n}\n",
		syntaxSays: "undeclaredTotal",
		crash:      "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"before\")\n\tpanic(\"boom at runtime\")\n}\n",
		loop:       "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"looping\")\n\tfor {\n\t}\n}\n",
		flood: `package main

import (
	"bufio"
	"os"
	"strings"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	line := strings.Repeat("x", 99) + "\n"
	for i := 0; i < 20000; i++ {
		w.WriteString(line)
	}
}
`,
	},
	{
		lang: "d",
		hello: `import std.stdio;

void main(string[] args) {
    writeln("hello from d");
    foreach (a; args[1 .. $]) writeln("[", a, "]");
}
`,
		files: `import std.algorithm : map, sum;
import std.array : split;
import std.conv : to;
import std.file : readText, write;
import std.range : drop;
import std.stdio : writeln;
import std.string : lineSplitter, strip;

void main() {
    auto total = readText("data.csv").strip.lineSplitter.drop(1)
        .map!(row => row.split(",")[1].strip.to!long).sum;
    write("out-d.txt", "d:" ~ total.to!string ~ "\n");
    writeln("sum=", total);
}
`,
		syntax:     "import std.stdio;\nvoid main() {\n    int n = \"not a number\";\n    writeln(n);\n}\n",
		syntaxSays: "cannot implicitly convert",
		crash:      "import std.stdio;\nvoid main() {\n    writeln(\"before\");\n    throw new Exception(\"boom at runtime\");\n}\n",
		loop:       "import std.stdio;\nvoid main() {\n    writeln(\"looping\");\n    stdout.flush();\n    shared long n;\n    while (true) { n = n + 1; }\n}\n",
		flood: `import std.array : replicate;
import std.stdio : writeln;

void main() {
    auto line = "x".replicate(99);
    foreach (i; 0 .. 20000) writeln(line);
}
`,
	},
	{
		lang: "f90",
		hello: `program main
  implicit none
  character(len=256) :: arg
  integer :: i
  write(*, '(a)') 'hello from f90'
  do i = 1, command_argument_count()
    call get_command_argument(i, arg)
    write(*, '(a)') '[' // trim(arg) // ']'
  end do
end program main
`,
		files: `program main
  implicit none
  character(len=256) :: line
  integer :: unit, ios, comma, amount, total
  total = 0
  open(newunit=unit, file='data.csv', status='old', action='read')
  read(unit, '(a)') line
  do
    read(unit, '(a)', iostat=ios) line
    if (ios /= 0) exit
    comma = index(line, ',')
    if (comma == 0) cycle
    read(line(comma+1:), *) amount
    total = total + amount
  end do
  close(unit)
  open(newunit=unit, file='out-f90.txt', status='replace', action='write')
  write(unit, '(a,i0)') 'f90:', total
  close(unit)
  write(*, '(a,i0)') 'sum=', total
end program main
`,
		syntax:     "program main\n  implicit none\n  print *, undeclared_total\nend program main\n",
		syntaxSays: "undeclared_total",
		crash:      "program main\n  implicit none\n  write(*, '(a)') 'before'\n  flush(6)\n  error stop 'boom at runtime'\nend program main\n",
		loop:       "program main\n  implicit none\n  integer, volatile :: n\n  write(*, '(a)') 'looping'\n  flush(6)\n  n = 0\n  do\n    n = n + 1\n  end do\nend program main\n",
		flood:      "program main\n  implicit none\n  integer :: i\n  do i = 1, 20000\n    write(*, '(a)') repeat('x', 99)\n  end do\nend program main\n",
	},
	{
		lang: "r",
		hello: `cat("hello from r\n")
for (a in commandArgs(trailingOnly = TRUE)) cat("[", a, "]\n", sep = "")
`,
		files: `d <- read.csv("data.csv")
total <- sum(d$amount)
writeLines(paste0("r:", total), "out-r.txt")
cat("sum=", total, "\n", sep = "")
`,
		syntax:     "x <- c(1, 2\nprint(x)\n",
		syntaxSays: "unexpected symbol",
		crash:      "cat(\"before\\n\")\nstop(\"boom at runtime\")\n",
		loop:       "cat(\"looping\\n\")\nn <- 0\nrepeat {\n  n <- n + 1\n}\n",
		flood:      "line <- strrep(\"x\", 99)\nfor (i in 1:20000) cat(line, \"\\n\", sep = \"\")\n",
	},
	{
		lang: "bash",
		hello: `echo "hello from bash"
for a in "$@"; do echo "[$a]"; done
`,
		files: `total=$(awk -F, 'NR > 1 { s += $2 } END { print s }' data.csv)
echo "bash:$total" > out-bash.txt
echo "sum=$total"
`,
		// bash has no compile step: a syntax error is a failed run (exit code 2).
		syntax:     "if then\necho never\n",
		syntaxSays: "Exit code 2",
		crash:      "echo before\necho 'boom at runtime' >&2\nexit 3\n",
		loop:       "echo looping\nwhile :; do :; done\n",
		flood:      "line=$(printf '%099d' 0 | tr 0 x)\nfor i in $(seq 20000); do echo \"$line\"; done\n",
	},
}
