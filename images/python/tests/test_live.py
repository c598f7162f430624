"""A live session's sandbox: one REPL serving a session's calls one after another, its
namespace kept, its state captured each time against the last capture the host stored."""

import os

from repl_client import ReplTestCase


class LiveTest(ReplTestCase):
    def test_a_capture_the_host_holds_is_the_base_of_the_next(self) -> None:
        repl = self.start()
        first = repl.run("x = [1, 2]", capture_state=True, live=True)
        self.assertOk(first)
        self.assertIsNotNone(first["state"])
        token = first["state_token"]
        self.assertTrue(token)
        read = repl.run("print(x)", capture_state=True, live=True, state_base=token)
        self.assertEqual((read["stdout"], read["state"], read["state_unchanged"]), ("[1, 2]\n", None, True))
        self.assertNotEqual(read["state_token"], token, "every capture has a token of its own")
        # A base the REPL did not give (the host did not store the last capture): the whole
        # state comes back, even unchanged.
        again = repl.run("print(x)", capture_state=True, live=True, state_base="not-this-one")
        self.assertEqual((again["state_unchanged"], again["state"] is not None), (False, True))
        written = repl.run("x.append(3)", capture_state=True, live=True, state_base=again["state_token"])
        self.assertFalse(written["state_unchanged"])
        self.assertIsNotNone(written["state"])

    def test_what_cannot_be_pickled_stays_live(self) -> None:
        repl = self.start()
        made = repl.run("gen = (i * i for i in range(5))\nnext(gen)", capture_state=True, live=True)
        self.assertOk(made)
        self.assertEqual(made["state_error"], "kept only while the session is live (unpicklable): gen (generator)")
        used = repl.run("next(gen)", capture_state=True, live=True, state_base=made["state_token"])
        self.assertEqual(used["result"], "1")

    def test_deleted_files_are_reported(self) -> None:
        repl = self.start()
        repl.run("open('a.txt', 'w').write('a')\nopen('b.txt', 'w').write('b')\nimport os\nos.makedirs('d', exist_ok=True)\n"
                 "open('d/c.txt', 'w').write('c')")
        removed = repl.run("os.remove('a.txt')\nos.remove('d/c.txt')\nopen('e.txt', 'w').write('e')")
        self.assertEqual(removed["deleted_files"], ["a.txt", "d/c.txt"])
        self.assertEqual([f["path"] for f in removed["files"]], ["e.txt"])

    def test_files_the_host_deletes_are_removed_first(self) -> None:
        repl = self.start()
        secret = os.path.join(repl.data_dir, "..", "kiln-outside.txt")
        repl.run("open('gone.txt', 'w').write('x')\nimport os\nos.symlink('/etc', 'link')")
        response = repl.run("import os\nsorted(os.listdir('.'))",
                            delete_files=["gone.txt", "never-there.txt", "../kiln-outside.txt", "link/passwd"])
        self.assertEqual(response["result"], "['link']")
        self.assertTrue(os.path.exists("/etc/passwd"), "a symlink on the way is never followed")
        self.assertIn("kiln: file '../kiln-outside.txt' not removed: the path leaves the data directory",
                      response["stderr"])
        self.assertFalse(os.path.exists(secret))

    def test_memory_is_reported_for_live_runs(self) -> None:
        repl = self.start()
        self.assertGreater(repl.run("x = bytearray(20 << 20)", live=True)["memory_bytes"], 20 << 20)
        self.assertEqual(repl.run("1")["memory_bytes"], 0)
