package store

import (
	"errors"
	"fmt"
	"io"
)

// errContentSize is content that was not the size its writer gave.
var errContentSize = errors.New("content is not the size given")

// exactly reads the size bytes of r and then its end: r longer or shorter than size is an
// error (errContentSize, or io.ErrUnexpectedEOF), so that a store never keeps a file whose
// recorded size is not its length.
func exactly(r io.Reader, size int64) io.Reader {
	return &sizedReader{r: r, left: size, size: size}
}

type sizedReader struct {
	r          io.Reader
	left, size int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		var one [1]byte
		if n, err := io.ReadFull(s.r, one[:]); n > 0 {
			return 0, fmt.Errorf("%w: more than %d bytes", errContentSize, s.size)
		} else if err != io.EOF && err != io.ErrUnexpectedEOF {
			return 0, err
		}
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if err == io.EOF && s.left > 0 {
		return n, fmt.Errorf("%w: %d bytes short of %d: %w", errContentSize, s.left, s.size, io.ErrUnexpectedEOF)
	}
	if err == io.EOF {
		err = nil // the end is checked on the next read
	}
	return n, err
}
