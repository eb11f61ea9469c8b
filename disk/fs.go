package disk

import (
	"errors"
	"hash/crc32"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// FS is the file operations the tier performs after startup, so that tests
// can inject the failures of a real disk (full, read-only, I/O errors).
type FS interface {
	// Stage writes data to a new file in dir that no reader can see
	// until it is committed.
	Stage(dir string, data []byte) (Staged, error)
	Remove(name string) error
	ReadFile(name string) ([]byte, error)
	SetStale(name string) error // set the stale flag of a record file in place
}

// Staged is a written file waiting to be made visible.
type Staged interface {
	Commit(path string) error // make it visible at path, replacing what is there
	Abort()                   // drop it
}

// osFS is FS on the operating system. It stages files with O_TMPFILE (an
// unnamed inode in the destination directory, linked into place on commit)
// where the file system has it: a crash then leaves nothing half-written
// behind, and creating a named temporary file measured several times
// slower on ext4 (docs/storage.md). Elsewhere it writes a named file in
// tmp and renames it.
type osFS struct{ tmp string }

func (o osFS) Stage(dir string, data []byte) (Staged, error) {
	fd, err := unix.Open(dir, unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return o.stageNamed(data)
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir+"/(staged)")
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // the write error is the one to report
		return nil, err
	}
	return unnamed{f}, nil
}

func (o osFS) stageNamed(data []byte) (Staged, error) {
	f, err := os.CreateTemp(o.tmp, "w-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return named(f.Name()), nil
}

// unnamed is an O_TMPFILE inode.
type unnamed struct{ f *os.File }

func (u unnamed) Commit(path string) error {
	src := "/proc/self/fd/" + strconv.Itoa(int(u.f.Fd()))
	err := unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.EEXIST) {
		// A file left by an earlier run under the same name.
		if err = os.Remove(path); err == nil {
			err = unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
		}
	}
	if err != nil {
		_ = u.f.Close() // the inode goes with it
		return &os.LinkError{Op: "link", Old: src, New: path, Err: err}
	}
	return u.f.Close()
}

// Abort closes the unnamed inode, which frees it.
func (u unnamed) Abort() { _ = u.f.Close() }

// named is a temporary file renamed into place.
type named string

func (n named) Commit(path string) error { return os.Rename(string(n), path) }
func (n named) Abort()                   { _ = os.Remove(string(n)) }

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
