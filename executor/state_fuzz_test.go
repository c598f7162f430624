package executor

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln"
)

// fuzzMaxBlob bounds the blobs of FuzzCheckState; its bombs are far smaller.
const fuzzMaxBlob = 1 << 20

// stateAllocSlack is what CheckState may allocate whatever the blob: the LZ4 reader's
// buffers for the largest block size (4 MiB), with room to spare. It must not grow
// with what a blob decompresses to.
const stateAllocSlack = 3 * 4 << 20

// FuzzCheckState checks blobs, raw or made by the LZ4 writer with the options opts
// picks and one byte then flipped at corrupt. CheckState must not panic, must answer
// with a *kiln.Error, and must give the verdict a separate, byte-at-a-time reading of
// the blob gives: a blob it accepts really decompresses to at most maxRaw bytes, and
// one it calls too large really decompresses past that. Nor may it allocate more than
// a fixed amount, however far the blob would decompress.
func FuzzCheckState(f *testing.F) {
	seeds := []struct {
		data     []byte
		compress bool
		opts     uint8
		corrupt  uint16
		maxRaw   uint32
	}{
		{[]byte("a pickled namespace"), true, 0, 0, 1 << 10},
		{[]byte{}, true, 0, 0, 0},
		{bytes.Repeat([]byte("ab"), 500), true, 0, 0, 1000},              // exactly at maxRaw
		{bytes.Repeat([]byte("ab"), 500), true, 0, 0, 999},               // one over
		{bytes.Repeat([]byte("x"), 300), true, 0b0001_0100, 0, 1 << 10},  // block checksums, a declared size
		{bytes.Repeat([]byte("y"), 300), true, 0b1110_0011, 0, 1 << 10},  // 4 MiB blocks, level 9, no checksum
		{[]byte("flip a byte of the payload"), true, 0, 0x0112, 1 << 10}, // corrupt
		{[]byte("flip the header checksum"), true, 0, 0x4006, 1 << 10},   // corrupt
		{[]byte("legacy frames are refused"), true, 0b1000_0000, 0, 1 << 10},
		{lz4Options(f, make([]byte, 1<<20), 0), false, 0, 0, 64 << 10},                                                  // a bomb: 1 MiB of zeros
		{append(lz4Options(f, make([]byte, 1<<10), 0), lz4Options(f, make([]byte, 1<<20), 0)...), false, 0, 0, 2 << 10}, // a small frame, then a bomb
		{append(lz4Options(f, make([]byte, 1<<10), 0), "trailing junk"...), false, 0, 0, 2 << 10},
		{lz4Options(f, make([]byte, 1<<10), 0)[:20], false, 0, 0, 2 << 10}, // truncated
		{[]byte{0x04, 0x22, 0x4d, 0x18}, false, 0, 0, 1 << 10},
		{[]byte("\x04\x22\x4d\x18not a frame at all"), false, 0, 0, 1 << 10},
		{[]byte("gASVJwAAAAAAAAB9lC4="), false, 0, 0, 1 << 10},                         // a pickle, not LZ4
		{[]byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}, false, 0, 0, 1 << 10}, // a skippable frame
	}
	for _, s := range seeds {
		f.Add(s.data, s.compress, s.opts, s.corrupt, s.maxRaw)
	}
	f.Fuzz(func(t *testing.T, data []byte, compress bool, opts uint8, corrupt uint16, maxRaw uint32) {
		blob := data
		if compress {
			blob = lz4Options(t, data, opts)
			if corrupt != 0 {
				blob[int(corrupt&0xff)%len(blob)] ^= byte(corrupt >> 8)
			}
		}
		// The limit stays small, so that no input, bomb or not, costs much to check.
		limit := int64(maxRaw % (128 << 10))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := CheckState(blob, fuzzMaxBlob, limit)
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > stateAllocSlack {
			t.Fatalf("CheckState allocated %d bytes for a blob of %d, limit %d", grew, len(blob), limit)
		}
		var code kiln.Code
		if err != nil {
			var e *kiln.Error
			if !errors.As(err, &e) {
				t.Fatalf("got error %v (%T), want a *kiln.Error", err, err)
			}
			code = e.Code
		}
		want := referenceVerdict(blob, fuzzMaxBlob, limit)
		if code != want {
			t.Fatalf("got verdict %q (%v), want %q for a blob of %d bytes, limit %d", code, err, want, len(blob), limit)
		}
	})
}

// referenceVerdict decides as CheckState should, by another path through the LZ4
// reader: the blob read a byte at a time, the output taken in 61-byte reads, at most
// maxRaw+1 bytes of it.
func referenceVerdict(blob []byte, maxBlob, maxRaw int64) kiln.Code {
	if int64(len(blob)) > maxBlob {
		return kiln.CodeTooLarge
	}
	if !bytes.HasPrefix(blob, []byte{0x04, 0x22, 0x4d, 0x18}) {
		return kiln.CodeInvalid
	}
	zr := lz4.NewReader(iotest.OneByteReader(bytes.NewReader(blob)))
	var buf [61]byte
	var n int64
	for n <= maxRaw {
		k, err := zr.Read(buf[:min(int64(len(buf)), maxRaw+1-n)])
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return kiln.CodeInvalid
		}
	}
	if n > maxRaw {
		return kiln.CodeTooLarge
	}
	return ""
}

// lz4Options compresses data into LZ4 frames with the options opts picks: bits 0-1
// the block size, 2 block checksums, 3 no content checksum, 4 the content size in the
// header, 5-6 the compression level, 7 the legacy format.
func lz4Options(tb testing.TB, data []byte, opts uint8) []byte {
	tb.Helper()
	sizes := []lz4.BlockSize{lz4.Block64Kb, lz4.Block256Kb, lz4.Block1Mb, lz4.Block4Mb}
	levels := []lz4.CompressionLevel{lz4.Fast, lz4.Level1, lz4.Level5, lz4.Level9}
	options := []lz4.Option{
		lz4.BlockSizeOption(sizes[opts&3]),
		lz4.BlockChecksumOption(opts&4 != 0),
		lz4.ChecksumOption(opts&8 == 0),
		lz4.CompressionLevelOption(levels[opts>>5&3]),
		lz4.LegacyOption(opts&128 != 0),
	}
	if opts&16 != 0 {
		options = append(options, lz4.SizeOption(uint64(len(data))))
	}
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	if err := zw.Apply(options...); err != nil {
		tb.Fatalf("lz4 options: %v", err)
	}
	if _, err := zw.Write(data); err != nil {
		tb.Fatalf("lz4 write: %v", err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatalf("lz4 close: %v", err)
	}
	return buf.Bytes()
}
