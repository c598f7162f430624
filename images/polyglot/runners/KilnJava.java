// kiln's Java step (languages.json, "java"): compiles one source file in memory and runs it, as
// `java Main.java` does, in one JVM. Unlike the JDK's source launcher, which runs the first class
// of the file, it runs the class that declares `public static void main(String[])`: the public
// one if there is such a class, else the first. So helper classes and records may come before
// the main class, and the class may have any name, whatever the file is called.
//
// A compile error prints javac's diagnostics and "error: compilation failed", and exits 1, as the
// source launcher does (languages.json's compile_error looks for that line). javac's warnings
// are printed; its notes ("uses unchecked or unsafe operations") are not.
//
// usage: java -cp /opt/kiln/java/kiln-java.jar KilnJava SOURCE.java [args...]

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.tools.FileObject;
import javax.tools.ForwardingJavaFileManager;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

public final class KilnJava {
    public static void main(String[] argv) throws Throwable {
        if (argv.length < 1) {
            System.err.println("usage: KilnJava SOURCE.java [args...]");
            System.exit(2);
        }
        Path path = Path.of(argv[0]);
        String source = Files.readString(path, StandardCharsets.UTF_8);
        String[] args = Arrays.copyOfRange(argv, 1, argv.length);

        JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
        StandardJavaFileManager standard = compiler.getStandardFileManager(null, null, StandardCharsets.UTF_8);
        Map<String, ByteArrayOutputStream> classes = new LinkedHashMap<>();
        JavaFileObject unit = new Source(path.getFileName().toString(), source);
        PrintWriter err = new PrintWriter(System.err, true);
        JavaCompiler.CompilationTask task = compiler.getTask(err, new Memory(standard, classes), null,
                List.of("-proc:none", "-XDsuppressNotes", "-encoding", "UTF-8"), null,
                List.of(unit));
        boolean ok;
        try {
            ok = task.call();
        } catch (RuntimeException e) { // a crash of javac itself, on absurd code
            e.printStackTrace();
            ok = false;
        }
        err.flush();
        if (!ok) {
            System.err.println("error: compilation failed");
            System.exit(1);
        }

        // javac writes the classes in the order the file declares them: the top-level ones (no
        // '$' in their names) are the candidates, the public one first.
        List<String> candidates = new ArrayList<>();
        for (String name : classes.keySet()) {
            if (name.indexOf('$') < 0) {
                candidates.add(name);
            }
        }
        ClassLoader loader = new MemoryLoader(classes, KilnJava.class.getClassLoader());
        List<Class<?>> ordered = new ArrayList<>();
        for (String name : candidates) {
            try {
                Class<?> cls = Class.forName(name, false, loader);
                ordered.add(java.lang.reflect.Modifier.isPublic(cls.getModifiers()) ? 0 : ordered.size(), cls);
            } catch (ClassNotFoundException | LinkageError e) {
                // not loadable on its own: not the one to run
            }
        }
        for (Class<?> cls : ordered) {
            Method main;
            try {
                main = cls.getDeclaredMethod("main", String[].class);
            } catch (NoSuchMethodException e) {
                continue;
            }
            if (!java.lang.reflect.Modifier.isStatic(main.getModifiers()) || main.getReturnType() != void.class) {
                continue;
            }
            main.setAccessible(true);
            Thread.currentThread().setContextClassLoader(loader);
            try {
                main.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                throw e.getCause(); // the JVM reports it as uncaught in "main", and exits 1
            }
            return;
        }
        System.err.println("error: no class in " + path.getFileName() + " declares public static void main(String[] args)");
        System.exit(1);
    }

    /** The source, from memory: any class name is compatible with it, public or not. */
    private static final class Source extends SimpleJavaFileObject {
        private final String name;
        private final String text;

        Source(String name, String text) {
            super(URI.create("string:///" + name), Kind.SOURCE);
            this.name = name;
            this.text = text;
        }

        @Override
        public String getName() {
            return name;
        }

        @Override
        public boolean isNameCompatible(String simpleName, Kind kind) {
            return true;
        }

        @Override
        public CharSequence getCharContent(boolean ignoreEncodingErrors) {
            return text;
        }
    }

    /** Keeps the compiled classes in memory. */
    private static final class Memory extends ForwardingJavaFileManager<StandardJavaFileManager> {
        private final Map<String, ByteArrayOutputStream> classes;

        Memory(StandardJavaFileManager standard, Map<String, ByteArrayOutputStream> classes) {
            super(standard);
            this.classes = classes;
        }

        @Override
        public JavaFileObject getJavaFileForOutput(Location location, String className, JavaFileObject.Kind kind,
                                                   FileObject sibling) {
            return new SimpleJavaFileObject(URI.create("mem:///" + className.replace('.', '/') + kind.extension), kind) {
                @Override
                public OutputStream openOutputStream() {
                    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                    classes.put(className, bytes);
                    return bytes;
                }
            };
        }
    }

    /** Loads the compiled classes, and everything else from its parent. */
    private static final class MemoryLoader extends ClassLoader {
        private final Map<String, ByteArrayOutputStream> classes;

        MemoryLoader(Map<String, ByteArrayOutputStream> classes, ClassLoader parent) {
            super(parent);
            this.classes = classes;
        }

        @Override
        protected Class<?> findClass(String name) throws ClassNotFoundException {
            ByteArrayOutputStream bytes = classes.get(name);
            if (bytes == null) {
                throw new ClassNotFoundException(name);
            }
            byte[] code = bytes.toByteArray();
            return defineClass(name, code, 0, code.length);
        }
    }
}
