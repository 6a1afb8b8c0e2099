// A free TCP port on 127.0.0.1, for a server a test or a tool starts (the port
// is released before it is returned; a server that then fails to bind retries).
import net from "node:net";

export function freePort() {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.unref();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}
