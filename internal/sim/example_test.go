package sim_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/riftflow/riftflow/internal/sim"
)

// Start a simulator on a random loopback port and resolve the shipped demo
// player's Riot ID, as riftflow's resolver would.
func Example() {
	s, err := sim.New(sim.Options{APIKey: "RGAPI-example", Limits: sim.RateLimits{App: "20:1,100:120"}})
	if err != nil {
		panic(err)
	}
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer s.Close()

	demo, _ := s.DemoPlayer()
	url := strings.Replace(base, "{route}", "americas", 1) +
		"/riot/account/v1/accounts/by-riot-id/" + demo.GameName + "/" + demo.TagLine
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Riot-Token", "RGAPI-example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("X-App-Rate-Limit"), resp.Header.Get("X-App-Rate-Limit-Count"))
	fmt.Println(strings.Contains(string(body), demo.PUUID), demo.Matches)
	// Output:
	// 200 20:1,100:120 1:1,1:120
	// true 16
}
