package prereq

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// TestMissingFailsWhenRequired runs itself in a child process with and
// without the variable and checks the child failed or skipped.
func TestMissingFailsWhenRequired(t *testing.T) {
	if os.Getenv("PREREQ_CHILD") != "" {
		Missing(t, "a thing", errors.New("not installed"))
		return
	}
	for _, required := range []bool{true, false} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMissingFailsWhenRequired$", "-test.v")
		cmd.Env = append(os.Environ(), "PREREQ_CHILD=1", Env+"=")
		if required {
			cmd.Env = append(cmd.Env, Env+"=1")
		}
		out, err := cmd.CombinedOutput()
		if required != (err != nil) {
			t.Errorf("required=%v: child err %v\n%s", required, err, out)
		}
	}
}
