import collections,sys
self_c=collections.Counter(); tot=0; thr=collections.Counter(); incl=collections.Counter()
for line in open(sys.argv[1]):
    stack,_,n=line.rstrip('\n').rpartition(' ')
    n=int(n); frames=stack.split(';')
    tot+=n; thr[frames[0][:60]]+=n; self_c[frames[-1]]+=n
    for f in set(frames[1:]): incl[f]+=n
print('total',tot)
for k,v in thr.most_common(8): print(v, k)
print('--self')
for k,v in self_c.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 30): print(f"{v/tot:6.1%}", k[:160])
print('--incl')
for k,v in incl.most_common(40): print(f"{v/tot:6.1%}", k[:160])
