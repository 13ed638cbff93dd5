package natsauth_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// An agent registered in the registry is let in with its seed; a client
// without a key is not.
func Example() {
	data, err := os.MkdirTemp("", "natsauth-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(data)
	reg, err := natsauth.Load(natsauth.RegistryPath(data)) // none yet: an empty registry
	if err != nil {
		fmt.Println(err)
		return
	}
	seed, err := reg.Add("alice", []string{"writer"})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := natsauth.StartServer(natsauth.ServerConfig{Listen: "127.0.0.1:-1",
		Store: filepath.Join(data, "jetstream"), Agents: reg})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	coordinator, err := srv.Connect(nats.Name("coordinator"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer coordinator.Close()

	url := srv.NATS().ClientURL()
	_, err = nats.Connect(url)
	fmt.Println("without a key:", err)
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		fmt.Println(err)
		return
	}
	pub, _ := kp.PublicKey()
	alice, err := nats.Connect(url, nats.Nkey(pub, kp.Sign))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer alice.Close()
	fmt.Println("alice:", alice.Status())
	// Output:
	// without a key: nats: Authorization Violation
	// alice: CONNECTED
}
