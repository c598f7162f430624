"""In-process tests of the language table: its rows, and the one-line error of a compile."""

import json
import os
import tempfile
import unittest
from typing import Any

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.languages import BASH, DEFAULT_ERROR, Language, TableError, error_line, load_table, parse_language
from kiln_repl.log import Logger


class ParseLanguageTest(unittest.TestCase):
    def test_a_full_row(self) -> None:
        row = {"file": "main.c", "compile": [["gcc", "-o", "main", "{file}"]], "run": ["{build}/main", "{args}"],
               "env": {"A": "{build}/a"}, "error": "error:", "compile_error": None}
        language = parse_language("c", row)
        self.assertEqual(language, Language("c", ("{build}/main", "{args}"), "main.c", (("gcc", "-o", "main", "{file}"),),
                                            (("A", "{build}/a"),), "error:", None))
        self.assertEqual(language.tools(), ["gcc"], "a program the run builds is no tool to look for")

    def test_defaults(self) -> None:
        language = parse_language("js", {"file": "main.js", "run": ["node", "{src}"]})
        self.assertEqual((language.compile, language.env, language.error, language.compile_error),
                         ((), (), DEFAULT_ERROR, None))
        self.assertEqual(BASH.tools(), ["bash"])

    def test_bad_rows(self) -> None:
        cases: list[tuple[str, Any, str]] = [
            ("python", {"file": "x", "run": ["p"]}, "not a name"),
            ("bash", {"file": "x", "run": ["p"]}, "not a name"),
            ("Upper", {"file": "x", "run": ["p"]}, "not a name"),
            ("c", ["gcc"], "not a JSON object"),
            ("c", {"file": "x", "run": ["p"], "runn": []}, "unknown fields runn"),
            ("c", {"file": "a/b.c", "run": ["p"]}, "file must be"),
            ("c", {"file": "..", "run": ["p"]}, "file must be"),
            ("c", {"file": "x", "run": []}, "run must be a command"),
            ("c", {"file": "x", "run": "p {src}"}, "run must be a command"),
            ("c", {"file": "x", "run": ["p", 1]}, "run must be a command"),
            ("c", {"file": "x", "run": ["{args}"]}, "{args} can only be an argument of run"),
            ("c", {"file": "x", "compile": ["gcc"], "run": ["p"]}, "compile must be a command"),
            ("c", {"file": "x", "compile": [["gcc", "{args}"]], "run": ["p"]}, "{args} can only"),
            ("c", {"file": "x", "run": ["p"], "env": {"A": 1}}, "env must map"),
            ("c", {"file": "x", "run": ["p"], "env": {"A=B": "1"}}, "env must map"),
            ("c", {"run": ["p"]}, "the code goes nowhere"),
            ("c", {"run": ["p", "{code}", "{src}"]}, "{src} and {file} need file"),
            ("c", {"file": "x", "run": ["p"], "error": "("}, "error is not a valid regular expression"),
            ("c", {"file": "x", "run": ["p"], "compile_error": 5}, "compile_error must be"),
        ]
        for name, row, want in cases:
            with self.subTest(name=name, row=row):
                with self.assertRaises(TableError) as caught:
                    parse_language(name, row)
                self.assertIn(want, str(caught.exception))

    def test_code_on_the_command_line(self) -> None:
        language = parse_language("sh", {"run": ["sh", "-c", "{code}", "{args}"]})
        self.assertIsNone(language.file)


class LoadTableTest(unittest.TestCase):
    def load(self, table: Any) -> tuple[list[str], str]:
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "languages.json")
            with open(path, "w") as handle:
                handle.write(table if isinstance(table, str) else json.dumps(table))
            log_path = os.path.join(directory, "log")
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT)
            try:
                languages = load_table(path, Logger(log_fd))
            finally:
                os.close(log_fd)
            with open(log_path) as log:
                return [language.name for language in languages], log.read()

    def test_rows_in_order_missing_tools_left_out(self) -> None:
        names, log = self.load({"b": {"file": "x", "run": ["sh", "{src}"]},
                                "a": {"file": "x", "compile": [["kiln-none", "{file}"]], "run": ["sh", "{src}"]},
                                "c": {"file": "x", "run": ["{build}/main"], "compile": [["true"]]}})
        self.assertEqual(names, ["b", "c"])
        self.assertEqual(log, "kiln-repl: language 'a' left out: kiln-none not installed\n")

    def test_unreadable_tables(self) -> None:
        names, log = self.load("{not json")
        self.assertEqual(names, [])
        self.assertIn("cannot be read", log)
        names, log = self.load([1, 2])
        self.assertEqual(names, [])
        self.assertIn("is not a JSON object", log)
        self.assertEqual(load_table("/nonexistent/languages.json", Logger(-1)), [])


class ErrorLineTest(unittest.TestCase):
    def test_cases(self) -> None:
        gcc = ("main.c: In function \u2018main\u2019:\n"
               "main.c:2:22: error: expected \u2018;\u2019 before \u2018return\u2019\n"
               "    2 | int main(){ puts(\"a\") return 0; }\n")
        ld = ("/usr/bin/ld: /tmp/cc.o: in function `main':\nmain.c:(.text+0x5): undefined reference to `foo'\n"
              "collect2: error: ld returned 1 exit status\n")
        go = "# command-line-arguments\n./main.go:4:15: undefined: x\n"
        cases = [
            (gcc, DEFAULT_ERROR, "main.c:2:22: error: expected \u2018;\u2019 before \u2018return\u2019"),
            (ld, r"\berror\b|undefined reference", "main.c:(.text+0x5): undefined reference to `foo'"),
            (ld, DEFAULT_ERROR, "collect2: error: ld returned 1 exit status"),
            (go, r"^\S+\.go:\d+:\d+: ", "./main.go:4:15: undefined: x"),
            ("\n  nothing matches here\nsecond\n", "zzz", "nothing matches here"),
            ("\x1b[31merror\x1b[0m: colored\n", DEFAULT_ERROR, "error: colored"),
            ("", DEFAULT_ERROR, "Compile error (exit code 2)"),
            ("error: " + "x" * 2000, DEFAULT_ERROR, "error: " + "x" * 990 + "..."),
        ]
        for output, pattern, want in cases:
            with self.subTest(output=output[:40], pattern=pattern):
                self.assertEqual(error_line(output, pattern, 2), want)


if __name__ == "__main__":
    unittest.main()
