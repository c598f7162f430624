// Package fidelity runs the project's notebooks (notebooks/*.py) cell by cell through a kiln
// session and through one live interpreter in the same image, and compares each cell's
// outcome: the measure of how much of a notebook a session keeps.
package fidelity

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Notebook is a jupytext "percent" file: cells begin at lines that start with "# %%".
type Notebook struct {
	Name  string
	Cells []Cell
}

// A Cell is one cell's code, and why it may differ in a restored session, when the
// notebook says so with a line "# fidelity: <why>" (an object that cannot be pickled).
// Kills is the status of a cell that ends its sandbox (oom), from a line
// "# fidelity-kills: <status>": no live interpreter survives it, so the cells after it
// are held to a session that stores every state before its answer.
type Cell struct {
	Code      string
	Explained string
	Kills     string
}

var (
	directive = regexp.MustCompile(`(?m)^# fidelity: (.+)$`)
	kills     = regexp.MustCompile(`(?m)^# fidelity-kills: (.+)$`)
)

// LoadNotebooks reads every notebook in dir, in name order.
func LoadNotebooks(dir string) ([]Notebook, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.py"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []Notebook
	for _, path := range paths {
		nb, err := loadNotebook(path)
		if err != nil {
			return nil, err
		}
		out = append(out, nb)
	}
	return out, nil
}

func loadNotebook(path string) (Notebook, error) {
	f, err := os.Open(path)
	if err != nil {
		return Notebook{}, err
	}
	defer f.Close()
	nb := Notebook{Name: strings.TrimSuffix(filepath.Base(path), ".py")}
	var cell *strings.Builder
	flush := func() {
		if cell != nil && strings.TrimSpace(cell.String()) != "" {
			code := cell.String()
			c := Cell{Code: code}
			if m := directive.FindStringSubmatch(code); m != nil {
				c.Explained = m[1]
			}
			if m := kills.FindStringSubmatch(code); m != nil {
				c.Kills = m[1]
			}
			nb.Cells = append(nb.Cells, c)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# %%") {
			flush()
			cell = &strings.Builder{}
			if strings.Contains(line, "[markdown]") {
				cell = nil // prose: nothing to run
			}
			continue
		}
		if cell != nil {
			cell.WriteString(line)
			cell.WriteByte('\n')
		}
	}
	flush()
	return nb, sc.Err()
}
