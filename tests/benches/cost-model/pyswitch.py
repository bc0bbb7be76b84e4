# 4 threads: two pairs ping-ponging through queues (many context switches), with json and
# hashing work between hand-offs; fixed work, prints its elapsed time and its CPU time (all
# threads', kernel work on their CPU included).
import hashlib, json, queue, sys, threading, time
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
def pair():
    a, b = queue.Queue(), queue.Queue()
    def ping():
        for i in range(N):
            json.dumps({"i": i, "v": list(range(20))}); a.put(i); b.get()
    def pong():
        for i in range(N):
            a.get(); hashlib.sha256(str(i).encode() * 50).hexdigest(); b.put(i)
    return [threading.Thread(target=ping), threading.Thread(target=pong)]
t0, c0 = time.monotonic(), time.process_time()
ts = pair() + pair()
for t in ts: t.start()
for t in ts: t.join()
print(f"pyswitch elapsed={time.monotonic() - t0:.4f} cpu={time.process_time() - c0:.4f}")
