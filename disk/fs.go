package disk

import (
	"hash/crc32"
	"os"
)

// FS is the file operations the tier performs after startup, so that tests
// can inject the failures of a real disk (full, read-only, I/O errors).
type FS interface {
	WriteFile(name string, data []byte) error // create name with data
	Rename(oldName, newName string) error
	Remove(name string) error
	ReadFile(name string) ([]byte, error)
	SetStale(name string) error // set the stale flag of a record file in place
}

// osFS is FS on the operating system.
type osFS struct{}

func (osFS) WriteFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Rename(oldName, newName string) error { return os.Rename(oldName, newName) }
func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

func (osFS) SetStale(name string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte{flagStale}, 4)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
