set -e
# What applications do on a remote directory; run once on the mount and
# once on a native directory, the outputs compared line by line. Ownership,
# link counts and sub-second times are what SFTP does not carry (see
# DESIGN.md, sftpfs): they are left out of what is printed.
R=$1
cd "$R"
mkdir -p proj/src proj/deep/a/b/c
printf 'fn main() {}\n' > proj/src/main.rs
for i in $(seq 1 200); do echo "line $i" >> proj/notes.txt; done
head -c 3000000 /usr/bin/bash > proj/blob
cp -a /usr/share/doc/fuse3 proj/doc
ln -s notes.txt proj/link
ln -s /usr/share/doc proj/abslink
touch -d '2020-01-02 03:04:05' proj/old
mv proj/old proj/older
chmod 640 proj/older
chmod 750 proj/deep/a
# rename over an existing file, and of a whole directory
echo first > proj/r1; echo second > proj/r2; mv proj/r1 proj/r2
mv proj/deep proj/moved
# truncate, append, overwrite in place
printf 'abcdefghij' > proj/edit; truncate -s 4 proj/edit; echo tail >> proj/edit
printf 'XY' | dd of=proj/edit bs=1 seek=1 conv=notrunc status=none
# a file written through an editor's write-to-temp-and-rename
printf 'v1\n' > proj/cfg; printf 'v2\n' > proj/.cfg.tmp && mv proj/.cfg.tmp proj/cfg
# tar round trip
tar cf archive.tar proj
mkdir unpacked && tar xf archive.tar -C unpacked
cmp proj/blob unpacked/proj/blob
find . -name '*.txt' | sort
du -s --apparent-size unpacked/proj | cut -f1
stat -c '%n %s %a %F' proj/notes.txt proj/link proj/edit proj/cfg
stat -c '%n %s %a %F %Y' proj/older unpacked/proj/older
# A hard link (SFTP shows it as a file of its own: no link count).
ln proj/notes.txt hardlink && cmp hardlink proj/notes.txt && rm hardlink
cat proj/edit proj/cfg proj/r2
readlink proj/link proj/abslink
ls -lR --time-style=+ unpacked | awk '/^total/ {next} NF > 2 {$2=""; $3=""; $4=""; print; next} {print}'
(cd unpacked/proj && wc -l < notes.txt && pwd | sed "s|$R|R|")
python3 - <<'PY'
import os, shutil
shutil.copytree('proj', 'pycopy', symlinks=True)
with open('pycopy/new.txt', 'w') as f: f.write('from python\n')
for root, dirs, files in sorted(os.walk('pycopy')):
    print(root, sorted(dirs), sorted(files))
print(open('pycopy/notes.txt').read().count('\n'))
# copy_file_range within the mount (sftpfs: the server copies, copy-data)
src = os.open('pycopy/blob', os.O_RDONLY)
dst = os.open('pycopy/blob2', os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
left = os.fstat(src).st_size
while left:
    n = os.copy_file_range(src, dst, left)
    if n == 0:
        break
    left -= n
os.close(src); os.close(dst)
print(open('pycopy/blob', 'rb').read() == open('pycopy/blob2', 'rb').read())
fd = os.open('pycopy/excl', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
os.close(fd)
try:
    os.open('pycopy/excl', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
except FileExistsError:
    print('EEXIST as expected')
for bad in (lambda: os.rmdir('pycopy/src/main.rs'), lambda: os.rmdir('pycopy/src'),
            lambda: os.unlink('pycopy/src'), lambda: os.mkdir('pycopy/src'),
            lambda: os.rename('pycopy/src', 'pycopy/notes.txt'),
            lambda: os.rename('pycopy/notes.txt', 'pycopy/src'),
            lambda: os.stat('pycopy/nothing'), lambda: open('pycopy/src', 'w')):
    try:
        bad()
        print('no error')
    except OSError as e:
        print(os.strerror(e.errno))
PY
cd proj && git init -q && git add . && git -c user.email=a@b -c user.name=t commit -qm first && git log --format=%s && git status --short && echo changed >> notes.txt && git status --short; cd ..
sqlite3 db.sqlite 'create table t(a integer, b text);' && for i in $(seq 1 2000); do echo "insert into t values($i, 'row $i');"; done | sqlite3 db.sqlite && sqlite3 db.sqlite 'select count(*), sum(a) from t; pragma integrity_check;'
ln -s nowhere dangling
(set -C; echo x > dangling) 2>&1 | sed 's/.*: //'
ls nowhere 2>&1 | sed 's/.*: //'
rm dangling
rm -r pycopy unpacked
df --output=size . > /dev/null
ls
