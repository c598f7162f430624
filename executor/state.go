package executor

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln"
)

// CheckState checks a state blob without unpickling it: it must be one LZ4 frame that
// decompresses, through a bounded reader, to at most maxRaw bytes, and the blob itself
// must be at most maxBlob bytes. The errors are *kiln.Error: too_large or
// invalid_request.
func CheckState(blob []byte, maxBlob, maxRaw int64) error {
	if int64(len(blob)) > maxBlob {
		return kiln.Errorf(kiln.CodeTooLarge, "state is %d bytes; the limit is %d", len(blob), maxBlob)
	}
	if len(blob) < 4 || !bytes.Equal(blob[:4], []byte{0x04, 0x22, 0x4d, 0x18}) {
		return kiln.Errorf(kiln.CodeInvalid, "state is not an LZ4 frame")
	}
	zr := lz4.NewReader(bytes.NewReader(blob))
	n, err := io.Copy(io.Discard, io.LimitReader(zr, maxRaw+1))
	if err != nil {
		return kiln.Errorf(kiln.CodeInvalid, "state does not decompress: %v", cleanLZ4Error(err))
	}
	if n > maxRaw {
		return kiln.Errorf(kiln.CodeTooLarge, "state decompresses past the limit of %d bytes", maxRaw)
	}
	return nil
}

func cleanLZ4Error(err error) string {
	var e interface{ Unwrap() error }
	for errors.As(err, &e) && e.Unwrap() != nil {
		err = e.Unwrap()
	}
	return fmt.Sprint(err)
}
