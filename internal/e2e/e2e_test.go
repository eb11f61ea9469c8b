package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Two test processes running at once hold different port blocks.
func TestPortBlocksAreExclusive(t *testing.T) {
	if os.Getenv("E2E_PORT_CHILD") == "1" {
		os.Stdout.WriteString(strconv.Itoa(portBlock()) + "\n")
		return
	}
	mine := portBlock()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPortBlocksAreExclusive$")
	cmd.Env = append(os.Environ(), "E2E_PORT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), "\n")[0]))
	if err != nil {
		t.Fatalf("child printed %q", out)
	}
	if theirs == mine {
		t.Fatalf("both processes got the block at %d", mine)
	}
	a := FreeAddr(t)
	if p, _ := strconv.Atoi(PortOf(a)); p < mine || p >= mine+portSpan {
		t.Fatalf("FreeAddr %s outside this process's block %d–%d", a, mine, mine+portSpan-1)
	}
}
