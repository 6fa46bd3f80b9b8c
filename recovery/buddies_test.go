package recovery

import (
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// Whether teams failing at once find their checkpoints is asked of the
// holders of their copies as the managers chose them: stride apart, or,
// once a checkpoint chose teams (--teams auto), so that each copy lives
// in another team (ftlayer.TeamBuddies). 8 PEs in teams {0,5} {1,4}
// {2,7} {3,6}, chosen at checkpoint 1: the copies of 0, 5, 2 and 7 are
// held by 1, 4, 3 and 6, so those two teams restart together, where,
// stride 1 apart, 7's copy would be with 0.
func TestCopiesAreLookedForWhereTheTeamsChosenPutThem(t *testing.T) {
	of := []int32{0, 1, 2, 3, 1, 0, 3, 2}
	teams, err := ftlayer.TeamsOf(of)
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		chosen bool
		set    []int32
		lost   string
	}{
		{"stride apart before teams are chosen", false, []int32{0, 2, 5, 7}, "PE 7 and PE 0, which holds the second copy of its checkpoint, were lost at once"},
		{"in another team once chosen", true, []int32{0, 2, 5, 7}, ""},
		{"a copy in a team failing too", true, []int32{2, 3, 6, 7}, "PE 2 and PE 3, which holds the second copy of its checkpoint, were lost at once"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Config{PEs: 8, Protocol: ftlayer.ProtocolSpec{Name: "spmd", JointTeams: true}})
			s.SetBuddyStride(1)
			if tt.chosen {
				s.CheckpointCommitted(1, &teams)
			}
			require.Equal(t, tt.lost, s.copiesLost(8, tt.set, tt.set))
		})
	}
}
