package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// salesCSV is a few MB of sales records, as a user would upload for analysis.
func salesCSV(rows int) []byte {
	var b bytes.Buffer
	b.WriteString("date,region,sku,units,unit_price\n")
	regions := []string{"north", "south", "east", "west"}
	for i := range rows {
		fmt.Fprintf(&b, "2026-%02d-%02d,%s,SKU-%05d,%d,%d.%02d\n", i%12+1, i%28+1, regions[i%4], i%9973, i%17+1, i%200+1, i%100)
	}
	return b.Bytes()
}

// npy is a float64 vector in NumPy's .npy format (version 1.0).
func npy(values []float64) []byte {
	header := fmt.Sprintf("{'descr': '<f8', 'fortran_order': False, 'shape': (%d,), }", len(values))
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	binary.Write(&b, binary.LittleEndian, values)
	return b.Bytes()
}

// Files past the size kiln keeps in memory while it reads an upload (64 KiB) are spooled
// to disk and streamed to the store: a 3 MB CSV and a 1.6 MB array come back whole, to
// pandas and NumPy in a run and to a download, byte for byte.
func TestUploadRealData(t *testing.T) {
	csv := salesCSV(90000)
	values := make([]float64, 200000)
	for i := range values {
		values[i] = math.Sin(float64(i) / 100)
	}
	arr := npy(values)
	up := upload(t, srv, nil, map[string][]byte{"sales.csv": csv, "signal.npy": arr})
	if len(up.Files) != 2 {
		t.Fatalf("upload answer %+v, want two files", up)
	}
	refs := []map[string]string{}
	ids := map[string]string{}
	for _, f := range up.Files {
		refs = append(refs, map[string]string{"id": f.FileID, "session_id": up.SessionID, "name": f.Filename})
		ids[f.Filename] = f.FileID
	}
	res := run(t, map[string]any{"files": refs, "code": "import numpy as np, pandas as pd\n" +
		"df = pd.read_csv('sales.csv')\nsig = np.load('signal.npy')\n" +
		"len(df), int(df.units.sum()), df.region.nunique(), sig.shape, round(float(sig.sum()), 6)"})
	var units int
	for i := range 90000 {
		units += i%17 + 1
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	want := fmt.Sprintf("(90000, %d, 4, (200000,), %.6f)", units, math.Round(sum*1e6)/1e6)
	if res.Status != "ok" || kilntest.Str(res.Result) != want {
		t.Fatalf("reading the uploads: %s %s (%s), want %s; stderr %q", res.Status, kilntest.Str(res.Result), kilntest.Str(res.Error), want, res.Stderr)
	}
	for name, data := range map[string][]byte{"sales.csv": csv, "signal.npy": arr} {
		resp, got := get(t, srv, "/v1/download/"+up.SessionID+"/"+ids[name], nil)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
			t.Errorf("download of %s: %d, %d bytes, want the %d uploaded", name, resp.StatusCode, len(got), len(data))
		}
	}
}
