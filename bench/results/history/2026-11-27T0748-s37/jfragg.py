import re,sys,collections
txt=open(sys.argv[1]).read()
events=txt.split('jdk.ExecutionSample')
top=collections.Counter(); incl=collections.Counter(); thr=collections.Counter(); n=0
for ev in events[1:]:
    m=re.search(r'sampledThread = "([^"]*)"',ev)
    t=m.group(1) if m else '?'
    frames=re.findall(r'^\s+([\w.$<>]+\(.*?\))\s+line:',ev,re.M)
    if not frames: continue
    n+=1; thr[re.sub(r'\d+','N',t)]+=1
    top[frames[0]]+=1
    for f in set(frames): incl[f]+=1
print('samples',n)
for k,v in thr.most_common(10): print(f"{v/n:6.1%} {k}")
print('--top')
for k,v in top.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 35): print(f"{v/n:6.1%} {k[:150]}")
print('--incl')
for k,v in incl.most_common(60): print(f"{v/n:6.1%} {k[:150]}")
