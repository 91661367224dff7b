// Preloaded (node --require) into fauxqs by internal/tools/emulator.
//
// fauxqs 2.4.1 always listens on 0.0.0.0; the local stack serves on loopback only, so the host of a
// listen call is replaced by SFNLIMIT_BIND_HOST. Once the server listens, its port is written to
// SFNLIMIT_READY_FILE, so that the caller can start fauxqs on port 0 and learn the port without racing
// for a free one.
"use strict";

const fs = require("node:fs");
const net = require("node:net");

const bindHost = process.env.SFNLIMIT_BIND_HOST || "127.0.0.1";
const readyFile = process.env.SFNLIMIT_READY_FILE;
const originalListen = net.Server.prototype.listen;

net.Server.prototype.listen = function listen(...args) {
  if (args.length > 0 && args[0] !== null && typeof args[0] === "object" && !Array.isArray(args[0])) {
    const options = args[0];
    if (options.path === undefined && options.fd === undefined && options.handle === undefined) {
      args[0] = { ...options, host: bindHost };
    }
  } else if (typeof args[0] === "number" || (typeof args[0] === "string" && /^[0-9]+$/.test(args[0]))) {
    // listen(port[, host][, backlog][, callback])
    if (typeof args[1] === "string") {
      args[1] = bindHost;
    } else {
      args.splice(1, 0, bindHost);
    }
  }
  if (readyFile) {
    this.once("listening", () => {
      const address = this.address();
      if (address && typeof address === "object") {
        const tmp = `${readyFile}.tmp`;
        fs.writeFileSync(tmp, JSON.stringify({ host: address.address, port: address.port, pid: process.pid }));
        fs.renameSync(tmp, readyFile);
      }
    });
  }
  return originalListen.apply(this, args);
};
