package coding

import (
	"compress/flate"
	"compress/zlib"
	"io"
)

func newZlib(w io.Writer) io.WriteCloser     { return zlib.NewWriter(w) }
func newRawFlate(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, 6); return fw }
