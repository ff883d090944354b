import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;

/**
 * What DBeaver, Metabase and Tableau do on connecting through the PostgreSQL JDBC driver: list the
 * tables and views of a schema, the columns of a table, then run a prepared statement.
 *
 * Usage: java -cp postgresql.jar:. JdbcProbe URL USER PASSWORD SCHEMA TABLE ACTOR
 * Prints: "table <name> <type>" per table or view, "column <name> <type name>" per column of TABLE,
 * and "count <n>": the rows of SCHEMA.TABLE whose actor_urn is ACTOR.
 */
public final class JdbcProbe {
    public static void main(String[] args) throws Exception {
        String url = args[0], user = args[1], password = args[2], schema = args[3], table = args[4], actor = args[5];
        try (Connection connection = DriverManager.getConnection(url, user, password)) {
            DatabaseMetaData meta = connection.getMetaData();
            try (ResultSet tables = meta.getTables(null, schema, "%", new String[] {"TABLE", "VIEW"})) {
                while (tables.next()) {
                    System.out.println("table " + tables.getString("TABLE_NAME") + " " + tables.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet columns = meta.getColumns(null, schema, table, "%")) {
                while (columns.next()) {
                    System.out.println("column " + columns.getString("COLUMN_NAME") + " " + columns.getString("TYPE_NAME"));
                }
            }
            String query = "SELECT count(*) FROM " + schema + "." + table + " WHERE actor_urn = ?";
            try (PreparedStatement statement = connection.prepareStatement(query)) {
                statement.setString(1, actor);
                try (ResultSet result = statement.executeQuery()) {
                    result.next();
                    System.out.println("count " + result.getLong(1));
                }
            }
        }
    }
}
