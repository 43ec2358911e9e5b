#!/usr/bin/env python3
"""Gets beside a long list, on a kubefold with one HTTP worker: two builds
(BIN_A, BIN_B) sync the same 10 simulated members (10,000 pods each); then,
ROUNDS times, each build in turn lists every pod (100k, about 366 MB) while
one other connection sends gets of one pod back to back until the list
ends (the list read by curl, the gets by this script), once after dropping the page cache (`cold`: needs root, to write
/proc/sys/vm/drop_caches; skipped otherwise) and once as it is (`warm`).
Prints each list's time and the gets answered beside it (median, slowest),
then medians over the rounds. The slowest get is how long the list held
the worker's other connections up.

    ops/bench/list-beside-gets.py BIN_A BIN_B [ROUNDS]
"""
import subprocess, time, os, re, sys, threading, http.client, json, tempfile, shutil, statistics
if len(sys.argv) < 3:
    raise SystemExit(__doc__)
builds={'A':sys.argv[1],'B':sys.argv[2]}
KF=builds['A']  # the members are started from the first build
cold_ok=os.access('/proc/sys/vm/drop_caches', os.W_OK)
conditions=('cold','warm') if cold_ok else ('warm',)
rounds=int(sys.argv[3]) if len(sys.argv)>3 else 4
work=tempfile.mkdtemp(prefix='cold-')
procs=[]
def wait_line(path, pat, t=120):
    end=time.time()+t
    while time.time()<end:
        try:
            m=re.search(pat, open(path).read())
            if m: return m
        except FileNotFoundError: pass
        time.sleep(0.05)
    raise SystemExit('timeout '+path)
try:
    clusters=[]
    for k in range(1,11):
        out=f'{work}/sim{k}.out'
        procs.append(subprocess.Popen([KF,'sim','--name',f'member{k}','--listen','127.0.0.1:0','--workload','empty','--pods','10000','--seed',str(k)],stdout=open(out,'w'),stderr=subprocess.DEVNULL))
    for k in range(1,11):
        m=wait_line(f'{work}/sim{k}.out', r'http://[0-9.:]+')
        clusters+=['--cluster',f'member{k}={m.group(0)}']
    open(f'{work}/cfg.yaml','w').write('httpWorkers: 1\n')
    addr={}
    for side,b in builds.items():
        out=f'{work}/kf-{side}.out'
        procs.append(subprocess.Popen([b,'serve','--listen','127.0.0.1:0','--data-dir',f'{work}/data-{side}','--config',f'{work}/cfg.yaml']+clusters,stdout=open(out,'w'),stderr=open(f'{work}/kf-{side}.err','w')))
        m=wait_line(out, r'127\.0\.0\.1:[0-9]+')
        addr[side]=m.group(0)
    def get(a, path):
        h,p=a.split(':'); c=http.client.HTTPConnection(h,int(p),timeout=120); c.request('GET',path); r=c.getresponse(); body=r.read(); c.close(); return r.status, body
    for side,a in addr.items():
        while True:
            try:
                if get(a,'/readyz')[0]==200: break
            except Exception: pass
            time.sleep(0.5)
    name=json.loads(get(addr['A'],'/api/v1/namespaces/load-0/pods?limit=1')[1])['items'][0]['metadata']['name']
    gpath=f'/api/v1/namespaces/load-0/pods/{name}'
    res={(s,c):[] for s in builds for c in conditions}
    for r in range(rounds):
        for cond in conditions:
            for side,a in addr.items():
                if cond=='cold':
                    subprocess.run(['sync']); open('/proc/sys/vm/drop_caches','w').write('3\n'); time.sleep(0.5)
                done=threading.Event(); out={}
                def lister():
                    # curl, not this process: a list read here would hold
                    # Python's lock from the gets and time the client.
                    r=subprocess.run(['curl','-s','-o','/dev/null','-w','%{time_total} %{size_download}',f'http://{a}/api/v1/pods'],capture_output=True,text=True)
                    t,n=r.stdout.split(); out['ms']=float(t)*1e3; out['bytes']=int(n); done.set()
                th=threading.Thread(target=lister); th.start(); time.sleep(0.01)
                h,p=a.split(':'); c=http.client.HTTPConnection(h,int(p),timeout=60); lat=[]
                while not done.is_set():
                    t=time.perf_counter(); c.request('GET',gpath); rr=c.getresponse(); rr.read(); lat.append((time.perf_counter()-t)*1e3)
                th.join(); c.close()
                res[(side,cond)].append((out['ms'],len(lat),max(lat) if lat else 0, statistics.median(lat) if lat else 0, out['bytes']))
                print(side,cond,'list %.0f ms (%d bytes), %d gets during it, get median %.2f ms, max %.1f ms'%(out['ms'],out['bytes'],len(lat),statistics.median(lat) if lat else 0,max(lat) if lat else 0),flush=True)
    if not cold_ok:
        print('not root: no cold rounds')
    for k,v in res.items():
        print(k, 'list median %.0f ms, gets/list %.0f, worst get (median over rounds) %.1f ms, worst of all %.1f ms'%(statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), statistics.median(x[2] for x in v), max(x[2] for x in v)))
finally:
    for p in procs: p.kill()
    shutil.rmtree(work, ignore_errors=True)
