/**
 * Unit tests of the write fence: a fenced KubeClient sends no write while the fence is down
 * (reads still go), and Controller.fence ties the fence to the manager session's lease.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { credentials } from "@grpc/grpc-js";
import { ControllerBuilder } from "../controller";
import { InformerServiceClient } from "../gen/steward/v1/informer";
import { FencedError, KubeClient } from "../kube";
import { Arrivals } from "./arrivals";
import { resourceType } from "../mirror";
import { ManagerSession } from "../session";

const CM_PATH = "/api/v1/namespaces/default/configmaps/c";

describe("KubeClient write fence", () => {
  const arrivals = new Arrivals();
  before(() => arrivals.start());
  after(() => arrivals.stop());

  it("sends no write while the fence is down, reads still go, and writes once it is up", async () => {
    arrivals.seen.length = 0;
    const api = arrivals.client();
    let up = false;
    api.writeFence = () => up;
    try {
      for (const method of ["PATCH", "POST", "PUT", "DELETE"]) {
        await assert.rejects(
          api.request(method, `${CM_PATH}?fieldManager=t`, { data: { k: "v" } }),
          (err: unknown) => err instanceof FencedError && err.method === method && err.path === CM_PATH,
        );
      }
      assert.equal(api.fencedWrites, 4);
      assert.deepEqual(arrivals.seen, [], "fenced writes reached the server");

      const read = await api.request("GET", CM_PATH);
      assert.equal(read.status, 200);
      assert.deepEqual(arrivals.seen, [`GET ${CM_PATH}`]);

      // The fence is asked at each write: raised, the same client sends.
      up = true;
      await api.request("PATCH", CM_PATH, { metadata: {} }, "application/merge-patch+json");
      assert.deepEqual(arrivals.seen, [`GET ${CM_PATH}`, `PATCH ${CM_PATH}`]);
      assert.equal(api.fencedWrites, 4);

      // Without a fence every write goes.
      up = false;
      api.writeFence = undefined;
      await api.request("DELETE", CM_PATH);
      assert.equal(arrivals.seen.length, 3);
    } finally {
      api.close();
    }
  });
});

describe("Controller.fence", () => {
  it("lets writes through without a session and follows the session's lease", async () => {
    const informer = new InformerServiceClient("127.0.0.1:1", credentials.createInsecure());
    const session = new ManagerSession("127.0.0.1:1", { controller: "fence-test" }, {}, credentials.createInsecure());
    try {
      const controller = new ControllerBuilder("fence-test")
        .for(resourceType("", "v1", "configmaps"))
        .complete(informer, { reconcile: () => Promise.resolve({}) });
      const api = new KubeClient({ server: "https://127.0.0.1:1" });
      controller.fence(api);
      const fence = api.writeFence;
      assert.ok(fence !== undefined, "fence() did not set the client's write fence");

      assert.equal(fence(), true, "without a manager session the fence refused a write");

      controller.session = session;
      assert.equal(fence(), false, "a session that never became active: the fence let a write through");

      // Active but past the renew deadline (as after a pause), before the session notices.
      session.active = true;
      assert.equal(fence(), false, "a session past its renew deadline: the fence let a write through");

      // Active within the renew deadline: writes pass.
      (session as unknown as { deadline: number }).deadline = performance.now() + 60_000;
      assert.equal(fence(), true, "a session holding the lease: the fence refused a write");
      api.close();
    } finally {
      session.active = false;
      await session.close();
      informer.close();
    }
  });
});
