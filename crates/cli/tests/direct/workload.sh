set -e
R=$1
cd $R
mkdir -p proj/src
printf 'fn main() {}\n' > proj/src/main.rs
for i in $(seq 1 50); do echo "line $i" >> proj/notes.txt; done
cp -a /etc/hostname proj/
ln -s notes.txt proj/link
touch -d '2020-01-02 03:04:05' proj/old
mv proj/old proj/older
tar cf archive.tar proj
mkdir unpacked && tar xf archive.tar -C unpacked
find . -name '*.txt' | sort
du -s --apparent-size unpacked/proj | cut -f1
stat -c '%n %s %a %F' proj/notes.txt proj/link proj/older unpacked/proj/older
ls -lR --time-style=+ unpacked | sed 's/ [0-9]* root root//' | grep -v '^total'
(cd unpacked/proj && wc -l < notes.txt && pwd | sed "s|$R|R|")
cat proj/notes.txt | grep 5 | sort -r | head -3 > picked
cat picked
python3 - <<'PY'
import os, shutil
shutil.copytree('proj', 'pycopy', symlinks=True)
with open('pycopy/new.txt', 'w') as f: f.write('from python\n')
for root, dirs, files in sorted(os.walk('pycopy')):
    print(root, sorted(dirs), sorted(files))
print(open('pycopy/notes.txt').read().count('\n'))
PY
cd proj && git init -q && git add . && git -c user.email=a@b -c user.name=t commit -qm first && git log --format=%s && git status --short && echo changed >> notes.txt && git status --short; cd ..
sqlite3 db.sqlite 'create table t(a integer, b text);' && for i in $(seq 1 10000); do echo "insert into t values($i, 'row $i');"; done | sqlite3 db.sqlite && sqlite3 db.sqlite 'select count(*), sum(a) from t; pragma integrity_check;'
ln -s nowhere dangling
(set -C; echo x > dangling) 2>&1 | sed 's/.*: //'
ls nowhere 2>&1 | sed 's/.*: //'
rm dangling
rm -r pycopy unpacked
ls
